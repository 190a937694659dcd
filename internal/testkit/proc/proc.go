// Package proc runs the helper processes tests start (etcd, kube-apiserver,
// Pebble, Portico itself): output to a log file, and no orphan left behind
// when the test binary dies.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one child process whose output goes to a log file.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited
	waitErr error         // valid after done is closed
}

// Start runs bin with args, its output appended to logPath and env added to
// this process's environment.
//
// The child gets SIGKILL when the thread that started it dies, so a test
// binary that panics or times out takes its children with it. The kernel
// ties that signal to the thread, not the process, hence the thread is
// pinned to the goroutine that waits for the child and lives as long as it.
func Start(name, logPath, bin string, env []string, args ...string) (*Proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = logFile
	p.cmd.Stderr = logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}

	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine, after the
		// child is gone.
		runtime.LockOSThread()
		defer logFile.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Kill ends the process at once.
func (p *Proc) Kill() error {
	if ok, _ := p.Exited(); ok {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	<-p.done
	return nil
}

// Stop asks the process to end with SIGTERM and kills its process group
// after grace.
func (p *Proc) Stop(grace time.Duration) error {
	if done, _ := p.Exited(); done {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("%s did not stop within %v of SIGTERM", p.Name, grace)
}

// Pid is the child's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// LogTail returns at most max bytes from the end of the process log.
func (p *Proc) LogTail(max int64) string { return Tail(p.LogPath, max) }

// Tail returns at most max bytes from the end of the file at path, saying
// how much was left out.
func Tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	off := st.Size() - max
	prefix := ""
	if off > 0 {
		prefix = fmt.Sprintf("(first %d bytes left out, see %s)\n", off, path)
	} else {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return prefix + string(b)
}

// Group is the processes of one test fixture, with their logs in one
// directory: started one by one, stopped together, last started first.
type Group struct {
	Dir string

	mu      sync.Mutex
	procs   []*Proc // in start order
	keep    bool
	stopped bool
	stopErr error
}

// Start starts bin in the group, its log at Dir/<name>.log.
func (g *Group) Start(name, bin string, env []string, args ...string) (*Proc, error) {
	p, err := Start(name, filepath.Join(g.Dir, name+".log"), bin, env, args...)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// Logs returns the tail (at most max bytes each) of every process log.
func (g *Group) Logs(max int64) string {
	g.mu.Lock()
	procs := slices.Clone(g.procs)
	g.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "===== %s (%s) =====\n%s\n", p.Name, p.LogPath, p.LogTail(max))
	}
	return b.String()
}

// KeepDir makes Stop leave Dir in place, for a failed test's logs.
func (g *Group) KeepDir() {
	g.mu.Lock()
	g.keep = true
	g.mu.Unlock()
}

// StopWhenDone stops g when t ends. When t failed, it keeps Dir and logs
// the last max bytes of every process log, under label: the full logs stay
// in Dir, and only their ends are printed so that the test's own messages
// are not buried.
func (g *Group) StopWhenDone(t testing.TB, label string, max int64) {
	t.Cleanup(func() {
		if t.Failed() {
			g.KeepDir()
			t.Logf("%s: logs kept in %s; their last lines:\n%s", label, g.Dir, g.Logs(max))
		}
		if err := g.Stop(); err != nil {
			t.Errorf("%s: %v", label, err)
		}
	})
}

// Stop kills every process, last started first, and removes Dir unless
// KeepDir was called. It is safe to call more than once.
func (g *Group) Stop() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return g.stopErr
	}
	g.stopped = true
	var errs []error
	for i := len(g.procs) - 1; i >= 0; i-- {
		if err := g.procs[i].Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if !g.keep {
		if err := os.RemoveAll(g.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", g.Dir, err))
		}
	}
	g.stopErr = errors.Join(errs...)
	return g.stopErr
}

// ErrPortTaken says a process exited because a port it was told to use was
// taken: the caller may retry with other ports.
var ErrPortTaken = errors.New("port taken")

// WaitReady polls check every interval until it succeeds, the process
// exits or ctx ends. An exit whose log says a port was in use wraps
// ErrPortTaken.
func WaitReady(ctx context.Context, p *Proc, interval time.Duration, check func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		if done, werr := p.Exited(); done {
			if strings.Contains(p.LogTail(64<<10), "address already in use") {
				return fmt.Errorf("%s exited (%v): %w", p.Name, werr, ErrPortTaken)
			}
			return fmt.Errorf("%s exited before it was ready: %v", p.Name, werr)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v (last check: %v)", p.Name, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// RetryPortTaken calls start up to attempts times while it fails with
// ErrPortTaken: a port picked free can be taken by another process before
// the child binds it, and a fresh set of ports fixes that.
func RetryPortTaken[T any](attempts int, start func() (T, error)) (T, error) {
	var v T
	var err error
	for range attempts {
		if v, err = start(); err == nil || !errors.Is(err, ErrPortTaken) {
			return v, err
		}
	}
	return v, err
}
