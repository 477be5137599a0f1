package record

import (
	"encoding/json"
	"strconv"
	"time"
)

// EncodeTimeline writes a token timeline as the stores keep it:
// [[index, offset_ns], ...], integers so that it comes back to the
// nanosecond, and compact (a sampled stream has one pair per chunk).
func EncodeTimeline(tl []TimelinePoint) string {
	return string(AppendTimeline(make([]byte, 0, 2+len(tl)*24), tl))
}

// AppendTimeline appends EncodeTimeline's text to b.
func AppendTimeline(b []byte, tl []TimelinePoint) []byte {
	b = append(b, '[')
	for i, p := range tl {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(p.Index), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(p.Offset), 10)
		b = append(b, ']')
	}
	return append(b, ']')
}

// ParseTimeline reads what EncodeTimeline wrote.
func ParseTimeline(s string) ([]TimelinePoint, error) {
	var pts [][2]int64
	if err := json.Unmarshal([]byte(s), &pts); err != nil {
		return nil, err
	}
	tl := make([]TimelinePoint, len(pts))
	for i, p := range pts {
		tl[i] = TimelinePoint{Index: int(p[0]), Offset: time.Duration(p[1])}
	}
	return tl, nil
}
