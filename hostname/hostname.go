// Package hostname matches names against Gateway API listener-style hostname
// patterns: exact names, suffix wildcards and a catch-all.
//
// A wildcard pattern "*.example.com" matches every name that ends in
// ".example.com" and has at least one character in front of that suffix, at
// any depth ("a.example.com", "a.b.example.com"), but not "example.com"
// itself. This is the listener meaning of a wildcard; a certificate SAN
// wildcard, which covers exactly one label, is a different rule and is not
// implemented here.
//
// Comparisons are case-insensitive for ASCII letters only (hostnames on the
// wire are ASCII; internationalized names arrive as punycode) and ignore one
// trailing dot.
package hostname

import (
	"math/bits"
	"math/rand/v2"
	"strings"
)

// maxLabelBit is the last bit of Table.wildLabels; suffixes with that many
// labels or more share it.
const maxLabelBit = 63

// maxInline is the longest key stored inside a record: 55 bytes, the length
// byte and a pointer-sized value make a 64-byte record, so verifying a hit
// touches one cache line. Longer keys (rare: hostnames are mostly far
// shorter) go to a plain map.
const maxInline = 55

// maxStackName bounds the long names Lookup lowercases on the stack; longer
// ones (longer than any valid DNS name) cost an allocation.
const maxStackName = 256

// Table maps listener-style hostname patterns to values. It is immutable once
// built and safe for concurrent Lookup.
//
// Lookup neither copies nor lowercases the name: the hash and the key
// comparison fold ASCII case 8 bytes at a time as they read it.
type Table[V any] struct {
	exact set[V]
	// wild is keyed by the suffix after "*.": "*.example.com" -> "example.com".
	wild set[V]

	// wildLabels has bit n set when some wildcard suffix has n labels
	// (clamped to maxLabelBit), so a lookup probes only the suffixes of a
	// name whose length can exist, instead of every suffix.
	wildLabels uint64
	// minWildLabels lets a lookup stop once the remaining suffixes are
	// shorter than every wildcard suffix.
	minWildLabels int

	fallback    V
	hasFallback bool
	n           int
}

// set is an open-addressing hash table from lowercase keys to values. Its
// one-byte tags (ctrl) are kept apart from the records: probing for a key
// that is not there reads only the compact tag array, which stays in the CPU
// caches even at 100,000 names, and a hit reads one record that holds both
// the key to verify and the value.
type set[V any] struct {
	ctrl  []uint8     // 0 = empty, else a tag from the hash; ends in 8 empty bytes
	recs  []record[V] // recs[i] belongs to ctrl[i]
	size  uint64      // home slots are in [0, size)
	seeds seeds
	long  map[string]V // keys longer than maxInline
}

type record[V any] struct {
	v   V
	n   uint8           // key length
	key [maxInline]byte // lowercase, zero-padded
}

// NewTable builds a table from parallel slices: values[i] belongs to
// patterns[i]. A pattern is "" (the fallback: matches every name, lowest
// precedence), an exact name "foo.example.com", or a wildcard
// "*.example.com". "*" on its own is treated like "". Patterns are
// normalized (see Normalize); when the same normalized pattern appears more
// than once the first one wins. NewTable panics if the slices differ in
// length.
func NewTable[V any](patterns []string, values []V) *Table[V] {
	if len(patterns) != len(values) {
		panic("hostname.NewTable: patterns and values differ in length")
	}
	norm := make([]string, len(patterns))
	nWild := 0
	for i, p := range patterns {
		norm[i] = Normalize(p)
		if isWildcard(norm[i]) {
			nWild++
		}
	}
	t := &Table[V]{}
	t.exact.init(len(patterns) - nWild)
	t.wild.init(nWild)
	for i, p := range norm {
		switch {
		case p == "" || p == "*":
			if !t.hasFallback {
				t.fallback, t.hasFallback = values[i], true
				t.n++
			}
		case isWildcard(p):
			suffix := p[2:]
			if !t.wild.insert(suffix, values[i]) {
				continue
			}
			t.n++
			labels := min(strings.Count(suffix, ".")+1, maxLabelBit)
			t.wildLabels |= 1 << labels
			if t.minWildLabels == 0 || labels < t.minWildLabels {
				t.minWildLabels = labels
			}
		default:
			if t.exact.insert(p, values[i]) {
				t.n++
			}
		}
	}
	return t
}

func (s *set[V]) init(n int) {
	// Random seeds per table keep clients from aiming names at one probe
	// run.
	for i := range s.seeds {
		s.seeds[i] = rand.Uint64()
	}
	// A load factor of at most 3/4 keeps probe runs short; the tags of a
	// run are compared 8 at a time.
	s.size = uint64(n+n/3) + 1
	if n == 0 {
		return // get never probes an empty set
	}
	s.ctrl = make([]uint8, s.size+8)
	s.recs = make([]record[V], s.size+8)
}

// insert adds key (normalized) unless it is already there, and reports
// whether it did.
func (s *set[V]) insert(key string, v V) bool {
	if len(key) > maxInline {
		if s.long == nil {
			s.long = make(map[string]V)
		}
		if _, dup := s.long[key]; dup {
			return false
		}
		s.long[key] = v
		return true
	}
	if _, dup := s.get(key); dup {
		return false
	}
	h := hash(&s.seeds, key)
	i := s.home(h)
	for s.ctrl[i] != 0 {
		i++
	}
	// Probe runs never wrap around; they run into the tail instead, which
	// must keep 8 empty tags so a word read at any slot finds an empty one.
	for uint64(len(s.ctrl)) < i+1+8 {
		s.ctrl = append(s.ctrl, 0)
		s.recs = append(s.recs, record[V]{})
	}
	s.ctrl[i] = tag(h)
	r := &s.recs[i]
	r.v, r.n = v, uint8(len(key))
	copy(r.key[:], key)
	return true
}

// home maps a hash onto [0, size) without a division, from its high bits.
func (s *set[V]) home(h uint64) uint64 {
	hi, _ := bits.Mul64(h, s.size)
	return hi
}

// tag takes the low bits of the hash: home uses the high ones, and a tag
// correlated with the slot would match most neighbours.
func tag(h uint64) uint8 {
	if g := uint8(h); g != 0 {
		return g
	}
	return 1
}

// get looks up key, folding its ASCII case; key carries no trailing dot.
func (s *set[V]) get(key string) (v V, ok bool) {
	if len(key) > maxInline {
		return s.getLong(key)
	}
	if s.size == 1 {
		return v, false // empty set: skip hashing
	}
	h := hash(&s.seeds, key)
	g := uint64(tag(h)) * lsb
	for i := s.home(h); ; i += 8 {
		w := loadBytes(s.ctrl, int(i))
		match := zeroBytes(w ^ g)
		empty := zeroBytes(w)
		if empty != 0 {
			// Only tags before the first empty slot belong to this run.
			match &= empty ^ (empty - 1)
		}
		for match != 0 {
			r := &s.recs[i+uint64(bits.TrailingZeros64(match)>>3)]
			match &= match - 1
			if r.equalFold(key) {
				return r.v, true
			}
		}
		if empty != 0 {
			return v, false
		}
	}
}

func (s *set[V]) getLong(key string) (v V, ok bool) {
	if s.long == nil {
		return v, false
	}
	if !hasUpper(key) {
		v, ok = s.long[key]
		return v, ok
	}
	if len(key) > maxStackName {
		v, ok = s.long[Normalize(key)]
		return v, ok
	}
	var buf [maxStackName]byte
	b := buf[:len(key)]
	for i := range b {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	v, ok = s.long[string(b)] // no allocation for a map index
	return v, ok
}

// equalFold reports whether the record's key equals s with ASCII case
// folded.
func (r *record[V]) equalFold(s string) bool {
	n := len(s)
	if int(r.n) != n {
		return false
	}
	if n < 8 {
		// Both sides are zero past n.
		return loadBytes(r.key[:], 0) == lowerWord(word(s, 0))
	}
	for i := 0; i+8 <= n; i += 8 {
		if loadBytes(r.key[:], i) != lowerWord(load64(s, i)) {
			return false
		}
	}
	// The last partial word is compared as the 8 bytes ending at n.
	return n%8 == 0 || loadBytes(r.key[:], n-8) == lowerWord(load64(s, n-8))
}

// Len returns the number of distinct patterns in the table, the fallback
// included.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Lookup returns the value of the most specific pattern matching name: an
// exact pattern beats any wildcard, a wildcard with a longer suffix beats a
// shorter one, and the fallback comes last. It does not allocate (except for
// mixed-case names longer than 256 bytes). A nil table matches nothing.
func (t *Table[V]) Lookup(name string) (v V, ok bool) {
	if t == nil {
		return v, false
	}
	if n := len(name); n > 0 && name[n-1] == '.' {
		name = name[:n-1]
	}
	if v, ok := t.exact.get(name); ok {
		return v, true
	}
	if t.wildLabels != 0 {
		if v, ok := t.lookupWild(name); ok {
			return v, true
		}
	}
	if t.hasFallback {
		return t.fallback, true
	}
	return v, false
}

// lookupWild finds the most specific wildcard matching name.
func (t *Table[V]) lookupWild(name string) (v V, ok bool) {
	n := len(name)
	full := n &^ 7 // bytes in whole words; the rest is read by word
	labels := 1
	for i := 0; i < full; i += 8 {
		labels += bits.OnesCount64(zeroBytes(load64(name, i) ^ dotWord))
	}
	if full < n {
		labels += bits.OnesCount64(zeroBytes(word(name, full) ^ dotWord))
	}
	// Suffixes are visited longest first, so the first hit is the most
	// specific wildcard. The suffix after a dot at index 0 would leave
	// nothing for the "*" to cover and is skipped.
	for i := 0; i < n; i += 8 {
		var m uint64
		if i < full {
			m = zeroBytes(load64(name, i) ^ dotWord)
		} else {
			m = zeroBytes(word(name, i) ^ dotWord)
		}
		for m != 0 {
			d := i + bits.TrailingZeros64(m)>>3
			m &= m - 1
			labels--
			if labels < t.minWildLabels {
				return v, false
			}
			if d == 0 || t.wildLabels&(1<<min(labels, maxLabelBit)) == 0 {
				continue
			}
			if v, ok := t.wild.get(name[d+1:]); ok {
				return v, true
			}
		}
	}
	return v, false
}

const (
	lsb     = 0x0101010101010101
	msb     = 0x8080808080808080
	dotWord = '.' * lsb
)

// zeroBytes returns a word with the high bit set in every byte of w that is
// zero, and no other bit: exact, no false positives from borrows.
func zeroBytes(w uint64) uint64 {
	return ^(((w &^ msb) + (msb - lsb)) | w) & msb
}

// lowerWord lowercases the ASCII letters among the 8 bytes of w.
func lowerWord(w uint64) uint64 {
	low7 := w &^ msb
	geA := low7 + (0x80-'A')*lsb   // high bit set where low7 >= 'A'
	gtZ := low7 + (0x80-'Z'-1)*lsb // high bit set where low7 > 'Z'
	upper := geA &^ gtZ &^ w & msb // and the byte itself is ASCII
	return w | upper>>2            // 0x80>>2 = 0x20, the case bit
}

// load64 reads s[i:i+8] as a little-endian word; the compiler merges the
// byte loads into one.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// loadBytes is load64 for a byte slice. (encoding/binary is not used: its
// calls are not inlined into this package's generic code when it is
// instantiated elsewhere.)
func loadBytes(b []byte, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// word reads up to 8 bytes of s from i, zero-extended past the end of s.
func word(s string, i int) uint64 {
	n := len(s)
	if i+8 <= n {
		return load64(s, i)
	}
	if n >= 8 {
		// The 8 bytes that end at n, shifted to drop those before i.
		return load64(s, n-8) >> (8 * uint(i+8-n))
	}
	var w uint64
	for j := n - 1; j >= i; j-- {
		w = w<<8 | uint64(s[j])
	}
	return w
}

// seeds are per-word keys of hash: the word at index j is mixed with
// seeds[j], the length with seeds[7].
type seeds [8]uint64

// hash hashes s (at most maxInline bytes) with its ASCII case folded. Every
// word is mixed on its own with a 64x64->128-bit multiply and the results
// are added, so the multiplies do not wait for each other.
func hash(k *seeds, s string) uint64 {
	n := len(s)
	h := uint64(n)*0x9e3779b97f4a7c15 ^ k[7] // mixed by the final mix
	if n < 8 {
		return mix(h + mix(lowerWord(word(s, 0))^k[0]))
	}
	j := 0
	i := 0
	for ; i+8 <= n; i += 8 {
		h += mix(lowerWord(load64(s, i)) ^ k[j&7])
		j++
	}
	if i < n {
		// The last 8 bytes, overlapping the previous word: still a function
		// of s alone, without a byte-by-byte tail.
		h += mix(lowerWord(load64(s, n-8)) ^ k[j&7])
	}
	return mix(h)
}

// mix is the xor of the halves of a 64x64->128-bit product.
func mix(x uint64) uint64 {
	hi, lo := bits.Mul64(x, 0x94d049bb133111eb)
	return hi ^ lo
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// Match reports whether name matches the listener-style pattern, with the
// same rules as Table: "" and "*" match everything, "*.example.com" matches
// names with at least one character in front of ".example.com", anything
// else must equal name. Both sides are normalized first.
func Match(pattern, name string) bool {
	pattern = Normalize(pattern)
	if pattern == "" || pattern == "*" {
		return true
	}
	name = Normalize(name)
	if isWildcard(pattern) {
		suffix := pattern[1:] // ".example.com"
		return len(name) > len(suffix) && name[len(name)-len(suffix):] == suffix
	}
	return name == pattern
}

// Normalize lowercases ASCII letters and strips one trailing dot. It returns
// name itself when nothing changes, so normalized input costs no allocation.
func Normalize(name string) string {
	if n := len(name); n > 0 && name[n-1] == '.' {
		name = name[:n-1]
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			b := []byte(name)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return name
}

// IsWildcard reports whether pattern is a wildcard pattern ("*." followed by
// a suffix).
func IsWildcard(pattern string) bool {
	return isWildcard(pattern)
}

func isWildcard(p string) bool {
	return len(p) > 2 && p[0] == '*' && p[1] == '.'
}
