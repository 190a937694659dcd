package kubelet

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// container runs one process of a pod and starts it again when it exits, as
// restartPolicy Always does, with a growing pause in between.
type container struct {
	proc    process
	netns   string
	logPath string
	changed func() // called whenever the process starts or exits

	mu       sync.Mutex
	pid      int
	started  time.Time // of the running process; zero while none runs
	restarts int32
	lastExit *exitInfo
	stopping bool
	stopped  chan struct{} // closed when the supervisor has returned
	kill     chan struct{} // closed by stop
}

type exitInfo struct {
	code     int
	started  time.Time
	finished time.Time
	err      string
}

// containerState is a snapshot for the pod status.
type containerState struct {
	pid      int
	started  time.Time
	restarts int32
	lastExit *exitInfo
}

func startContainer(p process, netns, logPath string, changed func()) *container {
	c := &container{
		proc: p, netns: netns, logPath: logPath, changed: changed,
		stopped: make(chan struct{}),
		kill:    make(chan struct{}),
	}
	go c.supervise()
	return c
}

func (c *container) state() containerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return containerState{pid: c.pid, started: c.started, restarts: c.restarts, lastExit: c.lastExit}
}

func (c *container) supervise() {
	defer close(c.stopped)
	backoff := time.Second
	for {
		start := time.Now()
		err := c.runOnce()
		c.mu.Lock()
		stopping := c.stopping
		if !stopping {
			c.restarts++
		}
		c.mu.Unlock()
		c.changed()
		if stopping {
			return
		}
		// A process that ran for a while was healthy: start again quickly.
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		logLine(c.logPath, fmt.Sprintf("process kubelet: %s exited (%v), starting again in %v", c.proc.container, err, backoff))
		select {
		case <-c.kill:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// runOnce starts the process and waits for it. The process gets SIGKILL
// when the thread that started it dies, so a harness that crashes takes its
// pods with it; hence the thread stays locked to this goroutine, which lives
// exactly as long as the process.
func (c *container) runOnce() error {
	log, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.recordExit(time.Now(), -1, fmt.Errorf("log: %w", err))
		return err
	}
	defer log.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", c.netns, c.proc.binary}, c.proc.args...)...)
	cmd.Env = c.proc.env
	var mu sync.Mutex
	stdout := &lineWriter{mu: &mu, out: log, stream: "stdout"}
	stderr := &lineWriter{mu: &mu, out: log, stream: "stderr"}
	defer stdout.Close()
	defer stderr.Close()
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	// Output goes through pipes; a grandchild that keeps them open must
	// not keep Wait from returning once the process itself has exited.
	cmd.WaitDelay = 2 * time.Second

	result := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		start := time.Now()
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			result <- errors.New("stopped before start")
			return
		}
		if err := cmd.Start(); err != nil {
			c.mu.Unlock()
			c.recordExit(start, -1, err)
			result <- err
			return
		}
		c.pid = cmd.Process.Pid
		c.started = start
		c.mu.Unlock()
		c.changed()
		err := cmd.Wait()
		code := -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		c.recordExit(start, code, err)
		result <- err
	}()
	return <-result
}

func (c *container) recordExit(start time.Time, code int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &exitInfo{code: code, started: start, finished: time.Now()}
	if err != nil {
		e.err = err.Error()
	}
	c.lastExit = e
	c.pid = 0
	c.started = time.Time{}
}

// stop ends the process: SIGTERM to its process group, SIGKILL after grace.
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	if !c.stopping {
		c.stopping = true
		close(c.kill)
	}
	pid := c.pid
	c.mu.Unlock()
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-c.stopped:
			return
		case <-time.After(grace):
		}
		c.mu.Lock()
		pid = c.pid
		c.mu.Unlock()
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	<-c.stopped
}

// listening reports whether the process has a TCP socket listening in the
// pod's namespace. It reads the socket tables through the process itself,
// but only once the process has entered the namespace: until "ip netns exec"
// has switched, /proc/<pid>/net shows the host's sockets.
func listening(pid int, netns string) bool {
	if pid <= 0 {
		return false
	}
	var want, got syscall.Stat_t
	if syscall.Stat("/var/run/netns/"+netns, &want) != nil {
		return false
	}
	if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &got) != nil {
		return false
	}
	if want.Ino != got.Ino || want.Dev != got.Dev {
		return false
	}
	// A TCP socket listening (state 0A), or a UDP socket bound and
	// unconnected (07): a UDP server has nothing else to show.
	for _, t := range []struct{ table, state string }{{"tcp", "0A"}, {"tcp6", "0A"}, {"udp", "07"}, {"udp6", "07"}} {
		if hasSocket(fmt.Sprintf("/proc/%d/net/%s", pid, t.table), t.state) {
			return true
		}
	}
	return false
}

// hasSocket scans a /proc/net/{tcp,udp} table for a socket in state.
func hasSocket(path, state string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 3 && fields[3] == state {
			return true
		}
	}
	return false
}

// logLine appends a line of the kubelet's own to a container log, so that
// restarts show up next to the output that explains them.
func logLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	w := &lineWriter{mu: &sync.Mutex{}, out: f, stream: "stderr"}
	_, _ = w.Write([]byte(line + "\n"))
}
