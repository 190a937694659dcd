//go:build tools

// Package pebblebin pins the version of the ACME test server that the tests
// of Portico run: hack/pebble.sh builds Pebble and its DNS companion from
// this module, so their versions come from go.mod and go.sum alone.
package pebblebin

import (
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble"
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv"
)
