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
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"strings"
	"unsafe"
)

// maxKey is the longest key the hash indexes hold (its length is one byte of
// a record); longer patterns, longer than any valid DNS name, go to a map.
const maxKey = 255

// maxStackName bounds the names lookupFolded lowercases on the stack; longer
// ones (longer than any valid DNS name) cost an allocation.
const maxStackName = 256

// Table maps listener-style hostname patterns to values. It is immutable once
// built and safe for concurrent Lookup.
//
// Keys are stored lowercase, and a name is first looked up as it is: names
// on the wire are nearly always lowercase already, and an exact hit proves
// it. Only when the exact lookup misses and the name may have capitals is
// it folded and looked up again. Before either, a name in a domain the
// table does not serve (no key ends in its last 8 bytes) misses at once.
//
// The hash indexes hold keys but no values, so that their code is not
// generic and their arrays stay small enough for the CPU caches at 100,000
// names; a hit returns a slot, whose value is in a parallel slice.
type Table[V any] struct {
	exact     index
	exactVals []V // by slot of exact
	// wild is keyed by the suffix after "*.": "*.example.com" -> "example.com".
	wild     index
	wildVals []V

	// wildLens has bit m set when some wildcard suffix is m bytes long
	// (m < 64). A name has a candidate suffix of m bytes only if the byte
	// in front of it is a dot: a lookup checks one byte per length the
	// table has, longest first, and hashes only the suffixes that pass.
	wildLens uint64
	// wildLong is set when some wildcard suffix is 64 bytes or longer
	// (rare, but a valid hostname can have one): lookups then also scan
	// the name for them.
	wildLong bool

	// domains is a filter of the last 8 bytes of every key: a name whose
	// last 8 bytes no key ends in, a name in a domain the table does not
	// serve, misses without a probe. It is off (nil) when a wildcard
	// suffix is shorter than 8 bytes, since names of any ending can match
	// it; exact keys that short do not matter, the filter only sees names
	// of 8 bytes or more.
	domains *domainFilter

	fallback    V
	hasFallback bool
	n           int

	// patterns and values are what the table was built from, normalized,
	// first of each pattern only: what With starts from when it rebuilds.
	patterns []string
	values   []V
	// over, when set, holds the exact patterns With added and removed
	// since the table was built; lookups consult it first.
	over *overlay[V]
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
	type placed struct {
		place place
		v     V
	}
	norm := make([]string, len(patterns))
	exactKeys := make([]string, 0, len(patterns))
	var wildKeys []string
	for i, p := range patterns {
		p = Normalize(p)
		norm[i] = p
		switch {
		case p == "" || p == "*":
		case isWildcard(p):
			wildKeys = append(wildKeys, p[2:])
		default:
			exactKeys = append(exactKeys, p)
		}
	}
	t := &Table[V]{}
	t.exact.init(exactKeys)
	t.wild.init(wildKeys)
	inExact := make([]placed, 0, len(exactKeys))
	inWild := make([]placed, 0, len(wildKeys))
	t.values = make([]V, 0, len(patterns))
	kept := 0 // norm[:kept] are the patterns kept, in order
	keep := func(i int) {
		norm[kept] = norm[i]
		kept++
		t.values = append(t.values, values[i])
	}
	for i, p := range norm {
		switch {
		case p == "" || p == "*":
			if !t.hasFallback {
				t.fallback, t.hasFallback = values[i], true
				t.n++
				norm[i] = ""
				keep(i)
			}
		case isWildcard(p):
			suffix := p[2:]
			place, added := t.wild.insert(suffix)
			if !added {
				continue
			}
			inWild = append(inWild, placed{place, values[i]})
			t.n++
			keep(i)
			if len(suffix) < 64 {
				t.wildLens |= 1 << len(suffix)
			} else {
				t.wildLong = true
			}
		default:
			if place, added := t.exact.insert(p); added {
				inExact = append(inExact, placed{place, values[i]})
				t.n++
				keep(i)
			}
		}
	}
	t.patterns = norm[:kept:kept]
	t.domains = newDomainFilter(exactKeys, wildKeys)
	t.exactVals = make([]V, t.exact.slots())
	for _, e := range inExact {
		t.exactVals[t.exact.resolve(e.place)] = e.v
	}
	t.wildVals = make([]V, t.wild.slots())
	for _, e := range inWild {
		t.wildVals[t.wild.resolve(e.place)] = e.v
	}
	return t
}

// Len returns the number of distinct patterns in the table, the fallback
// included.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	if t.over != nil {
		return t.n - len(t.over.gone) + len(t.over.exact)
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
	if t.over != nil {
		return t.lookupLayered(name)
	}
	return t.lookupBase(name)
}

// lookupBase is Lookup in the table as it was built.
func (t *Table[V]) lookupBase(name string) (v V, ok bool) {
	if n := len(name); n > 0 && name[n-1] == '.' {
		name = name[:n-1]
	}
	// A name under 8 bytes can match no key the filter knows of.
	if f := t.domains; f != nil && len(name) >= 8 && !f.has(domainBit(word(unsafe.StringData(name), len(name)-8))) {
		return t.fallback, t.hasFallback
	}
	var i int
	if isShort(len(name)) {
		i = t.exact.short.find(name)
	} else {
		i = t.exact.findRest(name)
	}
	if i >= 0 {
		return t.exactVals[i], true
	}
	// A name with capitals can miss its pattern: fold it and start again.
	// (A hit proves there were none: the keys are lowercase.)
	if mayHaveUpper(name) {
		return t.lookupFolded(name)
	}
	i = t.findWild(name)
	if i >= 0 {
		return t.wildVals[i], true
	}
	if t.hasFallback {
		return t.fallback, true
	}
	return v, false
}

// lookupFolded is Lookup for a name with capitals: it lowercases the name
// and looks it up again.
func (t *Table[V]) lookupFolded(name string) (v V, ok bool) {
	if len(name) > maxStackName {
		// Not Normalize: the trailing dot is already gone, and a second
		// one belongs to the name.
		name = lowerASCII(name)
	} else {
		var buf [maxStackName]byte
		b := buf[:len(name)]
		for i := range b {
			b[i] = lower(name[i])
		}
		// The string views buf for the rest of this call only: nothing
		// keeps it, and buf is not written again.
		name = unsafe.String(&buf[0], len(b))
	}
	if i := t.exact.find(name); i >= 0 {
		return t.exactVals[i], true
	}
	if i := t.findWild(name); i >= 0 {
		return t.wildVals[i], true
	}
	if t.hasFallback {
		return t.fallback, true
	}
	return v, false
}

// findWild returns the wild slot of the most specific wildcard matching
// name, or -1.
func (t *Table[V]) findWild(name string) int {
	n := len(name)
	if t.wildLong && n > 65 {
		if i := t.findWildLong(name); i >= 0 {
			return i
		}
	}
	// Suffix lengths 1 to n-2: at least one byte goes in front of the dot
	// for the "*" to cover.
	cand := t.wildLens
	if n < 65 {
		cand &= 1<<max(n-1, 0) - 1
	}
	// Keep the lengths with a dot in front. The test is data, not a
	// branch: which of a table's lengths pass varies from name to name,
	// and a branch on it would mispredict.
	var dotted uint64
	for c := cand; c != 0; c &= c - 1 {
		m := bits.TrailingZeros64(c)
		dotted |= isDot(name[n-m-1]) << m
	}
	for dotted != 0 {
		m := bits.Len64(dotted) - 1 // longest first
		dotted &^= 1 << m
		suffix := name[n-m:]
		var i int
		if isShort(m) {
			i = t.wild.short.find(suffix)
		} else {
			i = t.wild.findRest(suffix)
		}
		if i >= 0 {
			return i
		}
	}
	return -1
}

// domainFilter has one bit per hash of a key's last 8 bytes, ASCII letters
// folded: 4,096 bits, 512 bytes, which stay in L1. A table in a few domains
// sets a few bits.
type domainFilter [64]uint64

func newDomainFilter(exact, wild []string) *domainFilter {
	for _, k := range wild {
		if len(k) < 8 {
			return nil
		}
	}
	f := new(domainFilter)
	for _, keys := range [2][]string{exact, wild} {
		for _, k := range keys {
			if n := len(k); n >= 8 {
				b := domainBit(word(unsafe.StringData(k), n-8))
				f[b>>6] |= 1 << (b & 63)
			}
		}
	}
	return f
}

// has reports whether bit b (from domainBit) is set: false means no key
// ends in the 8 bytes that hashed to it.
func (f *domainFilter) has(b uint64) bool {
	return f[b>>6]&(1<<(b&63)) != 0
}

// domainBit hashes a word with its ASCII letters folded to lowercase (and
// other bytes to something else: a false positive only costs a probe) to a
// bit of domainFilter.
func domainBit(w uint64) uint64 {
	return ((w | 0x20*lsb) * 0x9e3779b97f4a7c15) >> (64 - 12)
}

// isDot is 1 for '.' and 0 for any other byte, without a branch.
func isDot(c byte) uint64 {
	return uint64((uint32(c^'.') - 1) >> 31)
}

// findWildLong looks for wildcard suffixes of 64 bytes or more, longest
// first, and returns the wild slot of the longest, or -1.
func (t *Table[V]) findWildLong(name string) int {
	for p := 1; len(name)-p-1 >= 64; p++ {
		if name[p] != '.' {
			continue
		}
		if i := t.wild.find(name[p+1:]); i >= 0 {
			return i
		}
	}
	return -1
}

// index is a hash set of lowercase keys, in four parts. Keys of 8 to 31
// bytes, most hostnames and suffixes, are in short, and keys of 32 to 63
// bytes in wide: a hit reads one record of 32 or 64 bytes. Other keys up to
// maxKey bytes are in other, whose records are packed in an arena behind an
// offset per slot. Longer keys, longer than any valid DNS name, are in a
// map. Slots number the four parts one after the other.
type index struct {
	short shortSet
	wide  wideSet
	other otherSet
	// Keys over maxKey bytes, numbered from 0.
	long map[string]int
}

// place is where insert put a key: a part of the index and an index in it.
// resolve turns it into a slot once every key is in: the slots of a part
// come after those of the parts before it, which grow while keys go in.
type place struct {
	part uint8 // partShort, partWide, partOther or partLong
	i    int
}

const (
	partShort = iota
	partWide
	partOther
	partLong
)

func (x *index) init(keys []string) {
	var nShort, nWide, nOther, otherBytes int
	for _, k := range keys {
		switch n := len(k); {
		case isShort(n):
			nShort++
		case isWide(n):
			nWide++
		case n <= maxKey:
			nOther++
			otherBytes += 1 + n
		}
	}
	x.short.init(nShort)
	x.wide.init(nWide)
	x.other.init(nOther, otherBytes)
}

func isShort(n int) bool {
	return n >= 8 && n < shortRecord
}

func isWide(n int) bool {
	return n >= shortRecord && n < wideRecord
}

// slots returns the number of slots find can return.
func (x *index) slots() int {
	return x.first(partLong) + len(x.long)
}

// first returns the first slot of a part.
func (x *index) first(part uint8) int {
	n := 0
	if part > partShort {
		n += x.short.tags.slots()
	}
	if part > partWide {
		n += x.wide.tags.slots()
	}
	if part > partOther {
		n += x.other.tags.slots()
	}
	return n
}

// insert adds key (normalized) unless it is already there, and returns its
// place and whether it was added.
func (x *index) insert(key string) (p place, added bool) {
	n := len(key)
	switch {
	case isShort(n):
		i, added := x.short.insert(key)
		return place{partShort, i}, added
	case isWide(n):
		i, added := x.wide.insert(key)
		return place{partWide, i}, added
	case n <= maxKey:
		i, added := x.other.insert(key)
		return place{partOther, i}, added
	}
	if _, dup := x.long[key]; dup {
		return place{}, false
	}
	if x.long == nil {
		x.long = make(map[string]int)
	}
	k := len(x.long)
	x.long[key] = k
	return place{partLong, k}, true
}

// resolve turns a place from insert into a slot, once every key is in.
func (x *index) resolve(p place) int {
	return x.first(p.part) + p.i
}

// find returns the slot of key, or -1. (The lookups of Table call
// short.find themselves: the compiler does not inline this.)
func (x *index) find(key string) int {
	if isShort(len(key)) {
		return x.short.find(key)
	}
	return x.findRest(key)
}

// findRest is find for keys that are not short.
func (x *index) findRest(key string) int {
	var i int
	var part uint8
	switch n := len(key); {
	case isWide(n):
		i, part = x.wide.find(key), partWide
	case n <= maxKey:
		i, part = x.other.find(key), partOther
	default:
		k, ok := x.long[key]
		if !ok {
			return -1
		}
		i, part = k, partLong
	}
	if i < 0 {
		return -1
	}
	return x.first(part) + i
}

// tags are the one-byte tags of an open-addressing hash table, kept apart
// from its records: probing for a key that is not there reads only this
// compact array, which stays in the CPU caches at 100,000 keys. Probe runs
// are linear and compared 8 tags at a time.
type tags struct {
	ctrl []uint8 // 0 = empty, else a tag from the hash; ends in 8 empty bytes
	size uint64  // home slots are in [0, size)
}

func (t *tags) init(n int) {
	// A load factor of at most 3/5 keeps probe runs short: most misses
	// end within the first 8 tags, without a second round of the loop
	// (at 3/4 about half did not). The tags cost a byte a slot, and the
	// records of a shortSet 32 bytes a slot: at 100,000 keys 5.3 MB
	// instead of 4.3 MB, which measured no slower.
	t.size = uint64(n+n*2/3) + 1
	if n > 0 {
		t.ctrl = make([]uint8, t.size+8)
	}
}

func (t *tags) slots() int {
	return len(t.ctrl)
}

// empty reports whether no key was ever inserted: lookups then skip hashing.
func (t *tags) empty() bool {
	return t.size == 1
}

// home maps a hash onto [0, size) without a division, from its high bits.
func (t *tags) home(h uint64) uint64 {
	hi, _ := bits.Mul64(h, t.size)
	return hi
}

// add takes the first empty slot of h's probe run and returns it. Probe
// runs never wrap around; they run into the tail instead, which grows to
// keep 8 empty tags so that a word read at any slot finds an empty one: the
// caller grows its records to slots().
func (t *tags) add(h uint64) int {
	i := t.home(h)
	for t.ctrl[i] != 0 {
		i++
	}
	for uint64(len(t.ctrl)) < i+1+8 {
		t.ctrl = append(t.ctrl, 0)
	}
	t.ctrl[i] = tag(h)
	return int(i)
}

// tag takes the low bits of the hash: home uses the high ones, and a tag
// correlated with the slot would match most neighbours.
func tag(h uint64) uint8 {
	if g := uint8(h); g != 0 {
		return g
	}
	return 1
}

// candidates returns the tags matching g among the 8 at slot i, as the high
// bit of each matching byte, and whether the run ends within them.
func (t *tags) candidates(i uint64, g uint64) (match uint64, last bool) {
	w := loadBytes(t.ctrl, int(i))
	match = zeroBytes(w ^ g)
	empty := zeroBytes(w)
	if empty != 0 {
		// Only tags before the first empty slot belong to this run.
		match &= empty ^ (empty - 1)
	}
	return match, empty != 0
}

// recordSet is what shortSet and wideSet share: tags, and a fixed-size
// record per slot holding the key, zeros, and its length in the last byte.
type recordSet struct {
	tags
	recs []byte
}

// init sizes the set for n keys of records of size bytes, and draws its
// seeds. Random seeds per set keep clients from aiming names at one probe
// run.
func (r *recordSet) init(n, size int, seeds []uint64) {
	for i := range seeds {
		seeds[i] = rand.Uint64()
	}
	r.tags.init(n)
	r.recs = make([]byte, len(r.ctrl)*size)
}

// put adds key, whose hash is h, in records of size bytes, and returns its
// slot.
func (r *recordSet) put(h uint64, key string, size int) int {
	i := r.add(h)
	if grow := len(r.ctrl)*size - len(r.recs); grow > 0 {
		r.recs = append(r.recs, make([]byte, grow)...)
	}
	rec := r.recs[i*size : (i+1)*size]
	copy(rec, key)
	rec[size-1] = byte(len(key))
	return i
}

// shortRecord is the record size of shortSet, and one more than the longest
// key it holds: the last byte is the key's length.
const shortRecord = 32

// shortSet holds keys of 8 to 31 bytes, each in a 32-byte record at its
// slot: the key, zeros, and its length in the last byte. A key is read as 4
// words from both ends (overlapping when it is under 32 bytes), which cover
// it: the words are hashed and compared against the same words of the
// record, without a call and without a loop over the length.
type shortSet struct {
	recordSet
	seeds [4]uint64
}

func (s *shortSet) init(n int) {
	s.recordSet.init(n, shortRecord, s.seeds[:])
}

func (s *shortSet) insert(key string) (slot int, added bool) {
	i, h := s.probe(key)
	if i >= 0 {
		return i, false
	}
	return s.put(h, key, shortRecord), true
}

// find returns the slot of key (8 to 31 bytes), or -1.
func (s *shortSet) find(key string) int {
	if s.empty() {
		return -1
	}
	n := len(key)
	kp := unsafe.StringData(key)
	ob, oc := offsets(n)
	h := s.hash(word(kp, 0), word(kp, ob), word(kp, oc), word(kp, n-8), n)
	g := uint64(tag(h)) * lsb
	ctrl := unsafe.SliceData(s.ctrl)
	recs := unsafe.SliceData(s.recs)
	for i := int(s.home(h)); ; i += 8 {
		// tags.candidates, written out: it is too big to be inlined.
		w := word(ctrl, i)
		match := zeroBytes(w ^ g)
		empty := zeroBytes(w)
		if empty != 0 {
			match &= empty ^ (empty - 1)
		}
		for match != 0 {
			slot := i + bits.TrailingZeros64(match)>>3
			match &= match - 1
			// The key's words are loaded again rather than kept from
			// the hash: they are in L1, and keeping them live spills
			// the probe's state to the stack.
			rec := (*byte)(unsafe.Add(unsafe.Pointer(recs), slot*shortRecord))
			ob, oc := offsets(n)
			if int(*(*byte)(unsafe.Add(unsafe.Pointer(rec), shortRecord-1))) == n &&
				(word(rec, 0)^word(kp, 0))|(word(rec, ob)^word(kp, ob))|
					(word(rec, oc)^word(kp, oc))|(word(rec, n-8)^word(kp, n-8)) == 0 {
				return slot
			}
		}
		if empty != 0 {
			return -1
		}
	}
}

// probe is find that also returns key's hash, for insert. (The hash is 0
// in an empty set, which insert never sees: init counted its keys.)
func (s *shortSet) probe(key string) (int, uint64) {
	if s.empty() {
		return -1, 0
	}
	n := len(key)
	kp := unsafe.StringData(key)
	ob, oc := offsets(n)
	return s.find(key), s.hash(word(kp, 0), word(kp, ob), word(kp, oc), word(kp, n-8), n)
}

// word reads the 8 bytes at p+i as a little-endian word, without a bounds
// check: callers make sure they are in one array. The compiler merges the
// byte loads into one load where the CPU allows unaligned ones.
func word(p *byte, i int) uint64 {
	b := (*[8]byte)(unsafe.Add(unsafe.Pointer(p), i))
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// hash mixes each pair of words with its own seeds in one 64x64->128-bit
// multiply (the length goes in with the second word); the two products do
// not wait for each other, and folding each 128-bit product into 64 bits
// leaves both the low byte (the tag) and the high bits (the home slot)
// depending on every bit of the key.
func (s *shortSet) hash(a, b, c, d uint64, n int) uint64 {
	k := &s.seeds
	hi, lo := bits.Mul64(a^k[0], b^k[1]^uint64(n))
	h := hi ^ lo
	hi, lo = bits.Mul64(c^k[2], d^k[3])
	return h + (hi ^ lo)
}

// wideRecord is the record size of wideSet, and one more than the longest
// key it holds: the last byte is the key's length.
const wideRecord = 64

// wideSet is shortSet for keys of 32 to 63 bytes, such as
// "service.namespace.apps.example.com": 64-byte records, one cache line,
// and keys read as 8 words from both ends.
type wideSet struct {
	recordSet
	seeds [8]uint64
}

func (s *wideSet) init(n int) {
	s.recordSet.init(n, wideRecord, s.seeds[:])
}

func (s *wideSet) insert(key string) (slot int, added bool) {
	i, h := s.probe(key)
	if i >= 0 {
		return i, false
	}
	return s.put(h, key, wideRecord), true
}

// find returns the slot of key (32 to 63 bytes), or -1.
func (s *wideSet) find(key string) int {
	i, _ := s.probe(key)
	return i
}

// probe is find that also returns key's hash, for insert (see
// shortSet.probe).
func (s *wideSet) probe(key string) (int, uint64) {
	if s.empty() {
		return -1, 0
	}
	n := len(key)
	// 32 <= n < 64: every word read is inside key. (Words in variables,
	// not an array: the compiler would copy an array to the stack.)
	kp := unsafe.StringData(key)
	e := n - 32
	w0, w1, w2, w3 := word(kp, 0), word(kp, 8), word(kp, 16), word(kp, 24)
	w4, w5, w6, w7 := word(kp, e), word(kp, e+8), word(kp, e+16), word(kp, e+24)
	// shortSet.hash over 8 words: four multiplies that do not wait for
	// each other. (Written out here: as a method it is not inlined.)
	k := &s.seeds
	h := fold(w0^k[0], w1^k[1]^uint64(n)) + fold(w2^k[2], w3^k[3]) +
		fold(w4^k[4], w5^k[5]) + fold(w6^k[6], w7^k[7])
	g := uint64(tag(h)) * lsb
	ctrl := unsafe.SliceData(s.ctrl)
	recs := unsafe.SliceData(s.recs)
	for i := int(s.home(h)); ; i += 8 {
		c := word(ctrl, i)
		match := zeroBytes(c ^ g)
		empty := zeroBytes(c)
		if empty != 0 {
			match &= empty ^ (empty - 1)
		}
		for match != 0 {
			slot := i + bits.TrailingZeros64(match)>>3
			match &= match - 1
			rec := (*byte)(unsafe.Add(unsafe.Pointer(recs), slot*wideRecord))
			if int(*(*byte)(unsafe.Add(unsafe.Pointer(rec), wideRecord-1))) == n &&
				(word(rec, 0)^w0)|(word(rec, 8)^w1)|(word(rec, 16)^w2)|(word(rec, 24)^w3)|
					(word(rec, e)^w4)|(word(rec, e+8)^w5)|(word(rec, e+16)^w6)|(word(rec, e+24)^w7) == 0 {
				return slot, h
			}
		}
		if empty != 0 {
			return -1, h
		}
	}
}

// fold multiplies two words into 128 bits and folds the product into 64.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// otherSet holds keys under 8 bytes and from 32 to maxKey bytes, packed in
// an arena (a length byte and the key) behind an offset per slot, and hashed
// with the runtime's string hash.
type otherSet struct {
	tags
	offs  []uint32 // offs[i]: where slot i's record starts in arena
	arena []byte
	seed  maphash.Seed
}

func (o *otherSet) init(n, arenaBytes int) {
	o.seed = maphash.MakeSeed()
	o.tags.init(n)
	o.offs = make([]uint32, len(o.ctrl))
	o.arena = make([]byte, 0, arenaBytes)
}

func (o *otherSet) insert(key string) (slot int, added bool) {
	if i := o.find(key); i >= 0 {
		return i, false
	}
	i := o.add(maphash.String(o.seed, key))
	if grow := len(o.ctrl) - len(o.offs); grow > 0 {
		o.offs = append(o.offs, make([]uint32, grow)...)
	}
	o.offs[i] = uint32(len(o.arena))
	o.arena = append(o.arena, byte(len(key)))
	o.arena = append(o.arena, key...)
	return i, true
}

// find returns the slot of key (at most maxKey bytes), or -1.
func (o *otherSet) find(key string) int {
	if o.empty() {
		return -1
	}
	h := maphash.String(o.seed, key)
	g := uint64(tag(h)) * lsb
	for i := o.home(h); ; i += 8 {
		match, last := o.candidates(i, g)
		for match != 0 {
			slot := int(i) + bits.TrailingZeros64(match)>>3
			match &= match - 1
			r := int(o.offs[slot])
			if int(o.arena[r]) == len(key) && string(o.arena[r+1:r+1+len(key)]) == key {
				return slot
			}
		}
		if last {
			return -1
		}
	}
}

// minFlat is min without a branch (the compiler branches on min(a, b), and
// name lengths vary from one lookup to the next).
func minFlat(a, b int) int {
	d := a - b
	return b + d&(d>>(bits.UintSize-1))
}

// zeroNeg is max(c, 0) without a branch.
func zeroNeg(c int) int {
	return c &^ (c >> (bits.UintSize - 1))
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// zeroBytes returns a word with the high bit set in every byte of w that is
// zero, and no other bit: exact, no false positives from borrows.
func zeroBytes(w uint64) uint64 {
	return ^(((w &^ msb) + (msb - lsb)) | w) & msb
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// mayHaveUpper reports whether s may have an ASCII capital: it is true for
// every byte from 0x40 to 0x5f (capitals, and "@[\\]^_", none of which a
// hostname has), and for some bytes over 0x7f. It needs no loop for names
// of 8 to 63 bytes, and no constant but one.
func mayHaveUpper(s string) bool {
	n := len(s)
	p := unsafe.StringData(s)
	var x uint64
	switch {
	case isShort(n):
		ob, oc := offsets(n)
		a, b, c, d := word(p, 0), word(p, ob), word(p, oc), word(p, n-8)
		x = a&^(a<<1) | b&^(b<<1) | c&^(c<<1) | d&^(d<<1)
	case isWide(n):
		// The 8 words of wideSet.find.
		for _, i := range [8]int{0, 8, 16, 24, n - 32, n - 24, n - 16, n - 8} {
			w := word(p, i)
			x |= w &^ (w << 1)
		}
	default:
		return hasUpper(s)
	}
	// Bit 6 set and bit 5 clear, in any byte.
	return x&(0x40*lsb) != 0
}

// offsets returns where the middle two of the 4 words that cover a string
// of 8 to 31 bytes start: the 4 words are at 0, ob, oc and n-8, and overlap
// when it is under 32 bytes.
func offsets(n int) (ob, oc int) {
	return minFlat(8, n-8), zeroNeg(n - 16)
}

// hasUpper reports whether s has an ASCII capital, 8 bytes at a time.
func hasUpper(s string) bool {
	n := len(s)
	var acc uint64
	i := 0
	for ; i+8 <= n; i += 8 {
		acc |= upperBytes(load64(s, i))
	}
	if i < n {
		if n >= 8 {
			acc |= upperBytes(load64(s, n-8)) // overlaps the last whole word
		} else {
			for ; i < n; i++ {
				acc |= upperBytes(uint64(s[i]))
			}
		}
	}
	return acc != 0
}

// upperBytes returns a word with the high bit set in every byte of w that is
// an ASCII capital, and no other bit.
func upperBytes(w uint64) uint64 {
	low7 := w &^ msb
	geA := low7 + (0x80-'A')*lsb   // high bit set where low7 >= 'A'
	gtZ := low7 + (0x80-'Z'-1)*lsb // high bit set where low7 > 'Z'
	return geA &^ gtZ &^ w & msb   // and the byte itself is ASCII
}

// load64 reads s[i:i+8] as a little-endian word; the compiler merges the
// byte loads into one.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// loadBytes is load64 for a byte slice.
func loadBytes(b []byte, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
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
	return lowerASCII(name)
}

// lowerASCII lowercases ASCII letters, and returns s itself when it has
// none.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				b[j] = lower(b[j])
			}
			return string(b)
		}
	}
	return s
}

// IsWildcard reports whether pattern is a wildcard pattern ("*." followed by
// a suffix).
func IsWildcard(pattern string) bool {
	return isWildcard(pattern)
}

func isWildcard(p string) bool {
	return len(p) > 2 && p[0] == '*' && p[1] == '.'
}

// WithoutPort returns a Host header without its port, which the spec says to
// ignore: "a.example.com:8080" is "a.example.com" and "[::1]:8080" is
// "[::1]" (brackets kept, so that the result still joins with a port). A
// bare IPv6 address, with more than one colon and no brackets, has no port.
func WithoutPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	switch {
	case i < 0:
		return host
	case host[0] == '[':
		if j := strings.IndexByte(host, ']'); j >= 0 && j < i {
			return host[:i]
		}
		return host
	case strings.IndexByte(host, ':') != i:
		return host
	}
	return host[:i]
}
