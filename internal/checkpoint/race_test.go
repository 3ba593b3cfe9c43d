//go:build race

package checkpoint

// raceEnabled: the race detector is on (it makes a pass over GBs of data
// take tens of minutes: the tests that only need the size skip it).
const raceEnabled = true
