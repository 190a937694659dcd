package kubelet

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pendingStatus says why the Pod does not run: scheduled, but every
// container waiting with the reason.
func pendingStatus(st *corev1.PodStatus, pod *corev1.Pod, hostIP string, why *unsupported) {
	st.Phase = corev1.PodPending
	st.HostIP = hostIP
	st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	setCondition(st, corev1.PodScheduled, true, "", "")
	setCondition(st, corev1.ContainersReady, false, "ContainersNotReady", why.message)
	setCondition(st, corev1.PodReady, false, "ContainersNotReady", why.message)
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{
			Name:  c.Name,
			Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: why.reason, Message: why.message}},
		})
	}
	st.ContainerStatuses = statuses
}

// runningStatus reports the Pod's processes: Running with its address, and
// Ready once every container listens.
func runningStatus(st *corev1.PodStatus, pod *corev1.Pod, rt *podRuntime, hostIP string, ready bool) {
	st.Phase = corev1.PodRunning
	st.HostIP = hostIP
	st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	st.PodIP = rt.net.Addr.String()
	st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	if st.StartTime == nil {
		t := metav1.NewTime(rt.started.Truncate(time.Second))
		st.StartTime = &t
	}
	msg := ""
	if !ready {
		msg = "containers are not listening yet"
	}
	setCondition(st, corev1.PodScheduled, true, "", "")
	setCondition(st, corev1.PodReadyToStartContainers, true, "", "")
	setCondition(st, corev1.PodInitialized, true, "", "")
	setCondition(st, corev1.ContainersReady, ready, reasonIf(!ready, "ContainersNotReady"), msg)
	setCondition(st, corev1.PodReady, ready, reasonIf(!ready, "ContainersNotReady"), msg)

	statuses := make([]corev1.ContainerStatus, 0, len(rt.containers))
	for i, c := range rt.containers {
		cs := c.state()
		spec := pod.Spec.Containers[i]
		s := corev1.ContainerStatus{
			Name:         spec.Name,
			Image:        spec.Image,
			ImageID:      "process://" + c.proc.binary,
			RestartCount: cs.restarts,
			Ready:        ready && cs.pid > 0,
			Started:      new(cs.pid > 0),
		}
		if cs.pid > 0 {
			s.ContainerID = fmt.Sprintf("process://%d", cs.pid)
			s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(cs.started.Truncate(time.Second))}
		} else {
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "the process exited and is started again"}
		}
		if e := cs.lastExit; e != nil {
			s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
				ExitCode:   int32(e.code),
				Reason:     "Error",
				Message:    e.err,
				StartedAt:  metav1.NewTime(e.started.Truncate(time.Second)),
				FinishedAt: metav1.NewTime(e.finished.Truncate(time.Second)),
			}
		}
		statuses = append(statuses, s)
	}
	st.ContainerStatuses = statuses
}

func reasonIf(cond bool, reason string) string {
	if cond {
		return reason
	}
	return ""
}

// setCondition sets a condition, moving its transition time only when its
// status changes.
func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool, reason, msg string) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.Now()
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{
		Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now(),
	})
}
