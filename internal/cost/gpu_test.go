package cost

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAllocateHour(t *testing.T) {
	cny := func(n ...int64) []Money {
		out := make([]Money, len(n))
		for i, v := range n {
			out[i] = Money{v, "CNY"}
		}
		return out
	}
	cases := []struct {
		name string
		cost int64
		rows []HourRow
		w    Weights
		want []Money
	}{
		{"proportional to input + output", 1000, []HourRow{{Input: 100, Output: 100}, {Input: 300, Output: 500}}, DefaultWeights,
			cny(200, 800)},
		// 10 nanos over three equal rows: floors 3,3,3, the leftover nano to the first (ties: earlier row).
		{"largest remainder, ties to the earlier row", 10, []HourRow{{Input: 1}, {Input: 1}, {Input: 1}}, DefaultWeights,
			cny(4, 3, 3)},
		// Shares 100·1/7 = 14.28, 100·2/7 = 28.57, 100·4/7 = 57.14: floors 14+28+57 = 99,
		// the leftover nano goes to the largest remainder (28.57).
		{"leftover to the largest remainder", 100, []HourRow{{Input: 1}, {Input: 2}, {Input: 4}}, DefaultWeights,
			cny(14, 29, 57)},
		// Output weight 4: weights 100+4·50 = 300 and 300+4·0 = 300.
		{"output weighted", 600, []HourRow{{Input: 100, Output: 50}, {Input: 300}}, Weights{Cached: One, Output: 4 * One},
			cny(300, 300)},
		// Cached weight 0.1: row 1 is 100 uncached + 900·0.1 = 190, row 2 is 190 uncached.
		{"cached weighted", 380, []HourRow{{Input: 1000, Cached: 900}, {Input: 190}}, Weights{Cached: One / 10, Output: One},
			cny(190, 190)},
		{"idle hour stays unallocated", 1000, []HourRow{{}, {}}, DefaultWeights, cny(0, 0)},
		{"no rows", 1000, nil, DefaultWeights, cny()},
		{"negative cost (a refund) mirrors", -10, []HourRow{{Input: 1}, {Input: 1}, {Input: 1}}, DefaultWeights,
			cny(-4, -3, -3)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := AllocateHour(Money{c.cost, "CNY"}, c.rows, c.w)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("allocation (-want +got):\n%s", diff)
			}
		})
	}
}

// The allocation must sum to the hour's cost exactly, whatever the rows.
func TestAllocateHourSumsExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		rows := make([]HourRow, 1+r.IntN(50))
		for j := range rows {
			in := r.Int64N(200000)
			rows[j] = HourRow{Input: in, Cached: r.Int64N(in + 1), Output: r.Int64N(8000)}
		}
		cost := r.Int64N(int64(1000 * One))
		w := Weights{Cached: Decimal(r.Int64N(int64(One))), Output: Decimal(r.Int64N(int64(10 * One)))}
		var sum int64
		for _, m := range AllocateHour(Money{cost, "USD"}, rows, w) {
			if m.Nanos < 0 {
				t.Fatalf("case %d: negative share %d", i, m.Nanos)
			}
			sum += m.Nanos
		}
		if sum != cost {
			t.Fatalf("case %d: shares sum to %d; want %d", i, sum, cost)
		}
	}
	// Huge counts and the largest cost still add up.
	rows := []HourRow{{Input: 1 << 62, Output: 1 << 62}, {Input: 3}, {Output: 1<<62 + 7}}
	var sum int64
	for _, m := range AllocateHour(Money{1<<63 - 1, "USD"}, rows, Weights{Cached: One, Output: 1000 * One}) {
		sum += m.Nanos
	}
	if sum != 1<<63-1 {
		t.Errorf("extreme case sums to %d", sum)
	}
}

func TestGPUHourAllocate(t *testing.T) {
	tab := loadTable(t)
	g, _, _ := tab.GPUHourAt("vllm-a100", day("2026-11-15T10:00:00Z"))
	// 39.2 CNY; weights: 1000 uncached + 4·250 out = 2000; 100 uncached + 9000·0.1 cached = 1000 + 4·0.
	got := g.Allocate([]HourRow{{Input: 1000, Output: 250}, {Input: 9100, Cached: 9000}})
	want := []Money{{26133333333, "CNY"}, {13066666667, "CNY"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
	if g.Weights() != (Weights{Cached: One / 10, Output: 4 * One}) {
		t.Errorf("weights %+v", g.Weights())
	}
	g2, _, _ := tab.GPUHourAt("vllm-a100", day("2026-12-02T00:00:00Z"))
	if g2.Weights() != DefaultWeights {
		t.Errorf("default weights %+v", g2.Weights())
	}
}
