//go:build race

package proxy

// raceDetector is set when the tests run under the race detector, which
// makes a loopback request several times dearer.
const raceDetector = true
