package pipeline

import (
	"go.uber.org/zap"

	"portico.dev/portico/config"
)

// maxListenerNames bounds the listener names of one "listening" line: a
// port may serve 100,000 hostnames.
const maxListenerNames = 8

// logListening logs one "listening" line for each port of cfg that the
// data plane serves now and did not serve (with this protocol) after the
// last rebuild: where Portico listens, said once per port, with the
// Gateway and ListenerSet listeners behind it. Only the rebuild's
// goroutine calls it.
func (l *Loop) logListening(cfg *config.Config) {
	now := make(map[config.PortKey]config.Protocol, len(cfg.Ports))
	for _, p := range cfg.Ports {
		addr := l.runtime.PortAddr(p.Key())
		if addr == nil {
			continue
		}
		now[p.Key()] = p.Protocol
		if proto, ok := l.listening[p.Key()]; ok && proto == p.Protocol {
			continue
		}
		names := make([]string, 0, min(p.All.Len(), maxListenerNames))
		for i := range min(p.All.Len(), maxListenerNames) {
			names = append(names, p.All.At(i).Key)
		}
		fields := []zap.Field{zap.Stringer("address", addr), zap.Stringer("protocol", p.Protocol), zap.Strings("listeners", names)}
		if p.Streams {
			// Some listener takes TLS connections by SNI (TLSRoutes).
			fields = append(fields, zap.Bool("tlsStreams", true))
		}
		if more := p.All.Len() - len(names); more > 0 {
			fields = append(fields, zap.Int("moreListeners", more))
		}
		l.log.Info("listening", fields...)
	}
	l.listening = now
}
