package store

import "time"

// StartOfDay is when local day y-m-d begins in loc (the day normalised
// as time.Date does). Where a clock change skips midnight (Havana,
// Santiago), the day begins at the change, not at the 23:00 of the day
// before that time.Date would give.
func StartOfDay(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, loc).Date() // noon always exists
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if t.Day() != d {
		_, t = t.ZoneBounds() // the change: the first instant of day d
	}
	return t
}

// FloorDay is the start of t's local day in loc (zero stays zero).
func FloorDay(t time.Time, loc *time.Location) time.Time {
	if t.IsZero() {
		return t
	}
	y, m, d := t.In(loc).Date()
	return StartOfDay(y, m, d, loc)
}

// NextDay is the start of the local day after t's in loc.
func NextDay(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return StartOfDay(y, m, d+1, loc)
}
