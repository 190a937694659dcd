package secretstorage

// abandon stops renewing the held lock name without releasing it, as the
// death of the process would.
func (s *Storage) abandon(name string) {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h != nil {
		h.stop()
		<-h.done
	}
}

// Abandon is abandon for the external tests.
var Abandon = (*Storage).abandon
