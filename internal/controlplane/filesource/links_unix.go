//go:build unix

package filesource

import (
	"io/fs"
	"syscall"
)

// otherLinks reports whether the file info describes has more names than
// one: an edit through another name makes no event naming this one.
func otherLinks(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Nlink > 1
}
