//go:build race

package bench

// raceEnabled shrinks the ledgers of the ordinary tests under -race,
// which slows SQLite (pure Go here) several times over.
const raceEnabled = true
