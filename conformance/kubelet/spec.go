package kubelet

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Images maps an image repository (the reference without tag or digest,
// e.g. "registry.k8s.io/gateway-api/echo-basic") to the local binary that
// stands in for it. Every tag of a repository runs the same binary.
type Images map[string]string

// Binary returns the binary for image, and false when it has no mapping.
func (m Images) Binary(image string) (string, bool) {
	bin, ok := m[repository(image)]
	return bin, ok
}

// repository strips the tag and digest off an image reference. A colon
// after the last slash starts a tag; one before it belongs to a registry
// host with a port.
func repository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image
}

// process is what runs for one container: the binary, its arguments and
// environment, with every path under a volume mount moved to where the
// volume's files are on the host.
type process struct {
	container string
	binary    string
	args      []string
	env       []string
}

// lookups gives planPod what it needs from outside the pod object.
type lookups struct {
	podIP  string
	hostIP string
	secret func(namespace, name string) (*corev1.Secret, error)
	config func(namespace, name string) (*corev1.ConfigMap, error)
	// token gives a projected serviceAccountToken's content; nil leaves
	// those files out.
	token func(pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (string, error)
}

// unsupported is why a pod cannot run here; the pod stays Pending with it.
type unsupported struct {
	reason  string
	message string
}

func (u *unsupported) Error() string { return u.reason + ": " + u.message }

// checkPod reports what of the pod this kubelet cannot run, before any
// resources are spent on it.
func checkPod(pod *corev1.Pod, images Images) *unsupported {
	if len(pod.Spec.InitContainers) > 0 {
		return &unsupported{"InitContainersNotSupported", "the process kubelet runs no init containers"}
	}
	if pod.Spec.HostNetwork {
		return &unsupported{"HostNetworkNotSupported", "every pod gets a network namespace of its own"}
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := images.Binary(c.Image); !ok {
			return &unsupported{"ImageNotMapped", fmt.Sprintf("container %q: image %s has no local binary", c.Name, c.Image)}
		}
		if len(c.Command) > 0 {
			return &unsupported{"CommandNotSupported", fmt.Sprintf("container %q: a command replaces the image's entry point, which is a local binary here", c.Name)}
		}
		if len(c.EnvFrom) > 0 {
			return &unsupported{"EnvFromNotSupported", fmt.Sprintf("container %q uses envFrom", c.Name)}
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Secret != nil, v.ConfigMap != nil, v.EmptyDir != nil, v.Projected != nil:
		default:
			return &unsupported{"VolumeNotSupported", fmt.Sprintf("volume %q: only secret, configMap, emptyDir and projected volumes are written", v.Name)}
		}
	}
	return nil
}

// writeVolumes writes each volume of the pod into dir/<volume name>/ and
// returns the host directory of every volume by name. Of projected volumes,
// the ServiceAccount tokens (for the audience asked) and ConfigMap and
// Secret keys are written; downward API files are not (nothing mapped to a
// local binary reads them). Tokens are renewed while the pod runs
// (renewTokens).
func writeVolumes(pod *corev1.Pod, dir string, l lookups) (map[string]string, error) {
	paths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		paths[v.Name] = vdir
		var files map[string][]byte
		switch {
		case v.Secret != nil:
			s, err := l.secret(pod.Namespace, v.Secret.SecretName)
			if err != nil {
				return nil, fmt.Errorf("volume %q: secret %s: %w", v.Name, v.Secret.SecretName, err)
			}
			files = projectKeys(s.Data, v.Secret.Items)
		case v.ConfigMap != nil:
			cm, err := l.config(pod.Namespace, v.ConfigMap.Name)
			if err != nil {
				return nil, fmt.Errorf("volume %q: config map %s: %w", v.Name, v.ConfigMap.Name, err)
			}
			data := map[string][]byte{}
			for k, val := range cm.Data {
				data[k] = []byte(val)
			}
			for k, val := range cm.BinaryData {
				data[k] = val
			}
			files = projectKeys(data, v.ConfigMap.Items)
		case v.Projected != nil:
			var err error
			if files, err = projected(pod, v.Projected, l); err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
		for rel, data := range files {
			path := filepath.Join(vdir, filepath.Clean("/"+rel))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
	}
	return paths, nil
}

func projected(pod *corev1.Pod, v *corev1.ProjectedVolumeSource, l lookups) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, src := range v.Sources {
		switch {
		case src.ServiceAccountToken != nil && l.token != nil:
			tok, err := l.token(pod, src.ServiceAccountToken)
			if err != nil {
				return nil, err
			}
			files[src.ServiceAccountToken.Path] = []byte(tok)
		case src.ConfigMap != nil:
			cm, err := l.config(pod.Namespace, src.ConfigMap.Name)
			if err != nil {
				if src.ConfigMap.Optional != nil && *src.ConfigMap.Optional {
					continue
				}
				return nil, fmt.Errorf("config map %s: %w", src.ConfigMap.Name, err)
			}
			data := map[string][]byte{}
			for k, val := range cm.Data {
				data[k] = []byte(val)
			}
			maps.Copy(files, projectKeys(data, src.ConfigMap.Items))
		case src.Secret != nil:
			s, err := l.secret(pod.Namespace, src.Secret.Name)
			if err != nil {
				if src.Secret.Optional != nil && *src.Secret.Optional {
					continue
				}
				return nil, fmt.Errorf("secret %s: %w", src.Secret.Name, err)
			}
			maps.Copy(files, projectKeys(s.Data, src.Secret.Items))
		}
	}
	return files, nil
}

// projectKeys maps keys to file names: every key under its own name, or only
// the listed items under their paths.
func projectKeys(data map[string][]byte, items []corev1.KeyToPath) map[string][]byte {
	files := map[string][]byte{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return files
	}
	for _, it := range items {
		if v, ok := data[it.Key]; ok {
			files[it.Path] = v
		}
	}
	return files
}

// planContainers resolves each container's binary, arguments and
// environment. volumes maps volume names to their host directories.
func planContainers(pod *corev1.Pod, images Images, volumes map[string]string, l lookups) ([]process, error) {
	procs := make([]process, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		bin, ok := images.Binary(c.Image)
		if !ok {
			return nil, fmt.Errorf("container %q: image %s has no local binary", c.Name, c.Image)
		}
		mounts, err := mountMap(c, volumes)
		if err != nil {
			return nil, err
		}
		env := []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOSTNAME=" + pod.Name,
		}
		for _, e := range c.Env {
			val, err := envValue(pod, e, l)
			if err != nil {
				return nil, fmt.Errorf("container %q: env %s: %w", c.Name, e.Name, err)
			}
			env = append(env, e.Name+"="+mounts.rewrite(val))
		}
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = mounts.rewrite(a)
		}
		procs = append(procs, process{container: c.Name, binary: bin, args: args, env: env})
	}
	return procs, nil
}

func envValue(pod *corev1.Pod, e corev1.EnvVar, l lookups) (string, error) {
	src := e.ValueFrom
	if src == nil {
		return e.Value, nil
	}
	switch {
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case "status.podIP":
			return l.podIP, nil
		case "status.hostIP":
			return l.hostIP, nil
		}
		return "", fmt.Errorf("field %s is not resolved by the process kubelet", src.FieldRef.FieldPath)
	case src.SecretKeyRef != nil:
		s, err := l.secret(pod.Namespace, src.SecretKeyRef.Name)
		if err != nil {
			return "", err
		}
		v, ok := s.Data[src.SecretKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("secret %s has no key %s", src.SecretKeyRef.Name, src.SecretKeyRef.Key)
		}
		return string(v), nil
	case src.ConfigMapKeyRef != nil:
		cm, err := l.config(pod.Namespace, src.ConfigMapKeyRef.Name)
		if err != nil {
			return "", err
		}
		v, ok := cm.Data[src.ConfigMapKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("config map %s has no key %s", src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Key)
		}
		return v, nil
	}
	return "", fmt.Errorf("valueFrom of this kind is not resolved by the process kubelet")
}

// mounts maps a container's mount paths to host directories. Processes run
// in the host's file system, so a path that the pod spec names under a mount
// is rewritten to the volume's directory on the host.
type mounts []mount

type mount struct{ path, host string }

func mountMap(c corev1.Container, volumes map[string]string) (mounts, error) {
	var m mounts
	for _, vm := range c.VolumeMounts {
		host, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("container %q: mount of unknown volume %q", c.Name, vm.Name)
		}
		if vm.SubPath != "" {
			host = filepath.Join(host, filepath.Clean("/"+vm.SubPath))
		}
		m = append(m, mount{path: filepath.Clean(vm.MountPath), host: host})
	}
	// The longest mount path first: a nested mount wins over its parent.
	sort.Slice(m, func(i, j int) bool { return len(m[i].path) > len(m[j].path) })
	return m, nil
}

func (m mounts) rewrite(s string) string {
	// A flag's value: "--token-file=/var/run/..." names a path too.
	if flag, value, ok := strings.Cut(s, "="); ok && strings.HasPrefix(flag, "-") {
		return flag + "=" + m.rewritePath(value)
	}
	return m.rewritePath(s)
}

func (m mounts) rewritePath(s string) string {
	for _, mt := range m {
		if s == mt.path {
			return mt.host
		}
		if rest, ok := strings.CutPrefix(s, mt.path+"/"); ok {
			return filepath.Join(mt.host, rest)
		}
	}
	return s
}
