package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// tokenFile is a projected ServiceAccount token written into a pod's
// volume.
type tokenFile struct {
	path string
	src  *corev1.ServiceAccountTokenProjection
}

// podTokens are the projected ServiceAccount tokens of pod, at the host
// paths writeVolumes wrote them to.
func podTokens(pod *corev1.Pod, volumes map[string]string) []tokenFile {
	var out []tokenFile
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if t := src.ServiceAccountToken; t != nil {
				out = append(out, tokenFile{path: filepath.Join(volumes[v.Name], filepath.Clean("/"+t.Path)), src: t})
			}
		}
	}
	return out
}

// defaultTokenLifetime is a projected token's lifetime when the pod does
// not say (the API's default expirationSeconds).
const defaultTokenLifetime = time.Hour

// tokenRenewal is how long after it was written a token is requested
// again: Config.TokenRenewal, else 80% of the shortest lifetime, as a
// kubelet does.
func (k *Kubelet) tokenRenewal(tokens []tokenFile) time.Duration {
	if k.cfg.TokenRenewal > 0 {
		return k.cfg.TokenRenewal
	}
	shortest := defaultTokenLifetime
	for _, t := range tokens {
		if t.src.ExpirationSeconds != nil {
			shortest = min(shortest, time.Duration(*t.src.ExpirationSeconds)*time.Second)
		}
	}
	return shortest * 4 / 5
}

// renewTokens requests the pod's projected tokens again before they
// expire, until stop is closed, and replaces each file in one rename: a
// process reading it gets the old token or the new one, never part of
// either. A failed request is tried again soon; the old token is still
// valid meanwhile.
func (k *Kubelet) renewTokens(pod *corev1.Pod, tokens []tokenFile, stop <-chan struct{}) {
	every := k.tokenRenewal(tokens)
	wait := every
	for {
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		wait = every
		for _, t := range tokens {
			if err := k.renewToken(pod, t); err != nil {
				k.cfg.Logf("process kubelet: pod %s/%s: %v", pod.Namespace, pod.Name, err)
				wait = min(every, 5*time.Second)
			}
		}
	}
}

func (k *Kubelet) renewToken(pod *corev1.Pod, t tokenFile) error {
	tok, err := k.serviceAccountToken(pod, t.src)
	if err != nil {
		return fmt.Errorf("renew token %s: %w", t.path, err)
	}
	tmp := t.path + ".new"
	if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
		return fmt.Errorf("renew token %s: %w", t.path, err)
	}
	if err := os.Rename(tmp, t.path); err != nil {
		return fmt.Errorf("renew token %s: %w", t.path, err)
	}
	return nil
}
