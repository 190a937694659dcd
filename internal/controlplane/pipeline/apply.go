package pipeline

import (
	"errors"
	"slices"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/translate"
)

// apply puts cfg on the data plane. When some new ports cannot be bound,
// it applies everything else, says in facts which ports were left out or
// that nothing could be applied (facts that decide statuses, in
// translate.Finish), and tries again later. It reports whether any
// configuration was applied.
func (l *Loop) apply(cfg *config.Config) (applied bool, facts translate.Facts, err error) {
	err = l.runtime.Apply(cfg)
	if err == nil {
		return true, facts, nil
	}
	// Ports already bound with the same protocol cannot fail; try those
	// first, then each new port on its own.
	bound := map[config.PortKey]config.Protocol{}
	for _, p := range l.runtime.Current().Ports {
		if l.runtime.PortAddr(p.Key()) != nil {
			bound[p.Key()] = p.Protocol
		}
	}
	without := func(ports []*config.Port) *config.Config {
		next := *cfg
		next.Ports = ports
		return &next
	}
	base := without(nil)
	var fresh []*config.Port
	for _, p := range cfg.Ports {
		if proto, ok := bound[p.Key()]; ok && proto == p.Protocol {
			base.Ports = append(base.Ports, p)
		} else {
			fresh = append(fresh, p)
		}
	}
	if baseErr := l.runtime.Apply(base); baseErr != nil {
		l.retryLater()
		facts.NotApplied = baseErr.Error()
		return false, facts, baseErr
	}
	var errs []error
	for _, p := range fresh {
		next := without(append(slices.Clone(base.Ports), p))
		if err := l.runtime.Apply(next); err != nil {
			errs = append(errs, err)
			facts.Unbound = append(facts.Unbound, translate.UnboundPort{Port: p.Key(), Message: err.Error()})
			continue
		}
		base = next
	}
	if len(errs) == 0 {
		return true, facts, nil // the first failure did not repeat
	}
	l.retryLater()
	return true, facts, errors.Join(errs...)
}

func (l *Loop) retryLater() {
	d := l.opts.RetryAfter
	if d == 0 {
		d = 10 * time.Second
	}
	time.AfterFunc(d, l.debouncer.Mark)
}
