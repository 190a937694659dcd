//go:build !unix

package filesource

import "io/fs"

// otherLinks cannot tell hard links apart here; symlinks are still known.
func otherLinks(fs.FileInfo) bool { return false }
