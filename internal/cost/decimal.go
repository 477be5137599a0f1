// Package cost turns token usage into money and checks it against what the
// providers bill.
//
// Where it sits in the flow: at the end of every request the gateway rates
// the request's usage with the price table in force at its arrival
// (Table.Rate), and the ledger row keeps the cost together with the price
// version that produced it, so a later price change never rewrites history.
// Reports (user × day, biz_line × month, model version) read those rated
// rows from the store. Self-hosted engines are priced by the GPU-hour instead
// (AllocateHour spreads each hour over the tokens served in it), and
// reconciliation (Reconcile) reads the ledger's daily totals beside a
// provider's usage export and explains every difference it can, leaving the
// rest visible as unexplained.
//
// Money is exact: amounts are integer nanos (1e-9 of the currency unit),
// decimals are parsed digit by digit and products are taken in 128-bit
// integers, so 0.1 is exactly 0.1 and a month of sums never drifts.
package cost

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Decimal is an exact decimal number with up to 9 fractional digits, held as
// an integer count of nanos (1e-9). Prices are Decimals per 1M tokens, so
// "0.15" is 150000000. Its text form (YAML, JSON, String) is the decimal as
// written, never a float, because a float cannot hold 0.1.
type Decimal int64

// One is the Decimal 1.
const One Decimal = 1e9

// maxWhole is the largest whole part a Decimal can carry.
const maxWhole = math.MaxInt64 / int64(One)

// ParseDecimal parses a plain decimal such as "0.15", "2.50", "3" or "-0.5"
// exactly. It rejects exponents, NaN and infinities, more than 9 decimal
// places and values beyond ±9223372036.854775807. Signs are accepted here
// because differences can be negative; prices are checked for sign where
// they are configured, so that the error can name the YAML path.
func ParseDecimal(s string) (Decimal, error) {
	t := strings.TrimSpace(s)
	neg := false
	if t != "" && (t[0] == '-' || t[0] == '+') {
		neg = t[0] == '-'
		t = t[1:]
	}
	whole, frac, dot := strings.Cut(t, ".")
	switch {
	case t == "":
		return 0, fmt.Errorf("must be a decimal number such as 0.15; got %q", s)
	case isNonFinite(t):
		return 0, fmt.Errorf("must be a finite decimal number; got %q", s)
	case strings.ContainsAny(t, "eE") && digitsOr(t, "eE+-."):
		return 0, fmt.Errorf("must be a plain decimal such as 0.001, without an exponent; got %q", s)
	case whole == "" || (dot && frac == "") || !digits(whole) || !digits(frac):
		return 0, fmt.Errorf("must be a decimal number such as 0.15; got %q", s)
	case len(frac) > 9:
		return 0, fmt.Errorf("must have at most 9 decimal places; got %q", s)
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 10 {
		return 0, fmt.Errorf("is too large (at most %d.854775807); got %q", maxWhole, s)
	}
	w, _ := strconv.ParseInt("0"+whole, 10, 64) // at most 10 digits: fits
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	if w > maxWhole || (w == maxWhole && f > math.MaxInt64%int64(One)) {
		return 0, fmt.Errorf("is too large (at most %d.854775807); got %q", maxWhole, s)
	}
	n := w*1e9 + f
	if neg {
		n = -n
	}
	return Decimal(n), nil
}

// MustDecimal is ParseDecimal for constants in code and tests.
func MustDecimal(s string) Decimal {
	d, err := ParseDecimal(s)
	if err != nil {
		panic("cost.MustDecimal: " + err.Error())
	}
	return d
}

func isNonFinite(t string) bool {
	switch strings.ToLower(strings.TrimPrefix(t, ".")) {
	case "nan", "inf", "infinity":
		return true
	}
	return false
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// digitsOr reports whether s has only digits and bytes from extra.
func digitsOr(s, extra string) bool {
	for i := range len(s) {
		if (s[i] < '0' || s[i] > '9') && !strings.ContainsRune(extra, rune(s[i])) {
			return false
		}
	}
	return true
}

// String is the exact decimal with no trailing zeros: "0.15", "3", "-0.000000001".
func (d Decimal) String() string { return format(int64(d), 0) }

// format renders nanos as a decimal with at least minFrac decimal places and
// no more than needed to be exact.
func format(n int64, minFrac int) string {
	u := uint64(n)
	sign := ""
	if n < 0 {
		sign, u = "-", -u // two's complement: also right for MinInt64
	}
	frac := fmt.Sprintf("%09d", u%1e9)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < minFrac {
		frac += "0"
	}
	s := sign + strconv.FormatUint(u/1e9, 10)
	if frac != "" {
		s += "." + frac
	}
	return s
}

// UnmarshalYAML reads a YAML number or string as written, so that 0.1 in a
// price table is exactly 0.1 (yaml would otherwise go through float64).
func (d *Decimal) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a decimal number such as 0.15", n.Line)}}
	}
	v, err := ParseDecimal(n.Value)
	if err != nil {
		// A TypeError lets yaml go on and report every bad value at once.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = v
	return nil
}

// MarshalYAML writes the decimal as a plain YAML number.
func (d Decimal) MarshalYAML() (any, error) {
	s := d.String()
	tag := "!!int"
	if strings.Contains(s, ".") {
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}, nil
}

// MarshalJSON writes a JSON string: many JSON readers turn numbers into
// float64, which would lose exactness.
func (d Decimal) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a string ("0.15") or a number (0.15), read as written.
func (d *Decimal) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := ParseDecimal(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Money is an amount of one currency in nanos (1e-9 of the unit).
type Money struct {
	Nanos    int64
	Currency string // ISO 4217 code: USD, CNY, …
}

// String renders the amount exactly, with at least two decimal places:
// "0.001234 USD", "1.50 CNY".
func (m Money) String() string {
	s := format(m.Nanos, 2)
	if m.Currency == "" {
		return s
	}
	return s + " " + m.Currency
}

type moneyJSON struct {
	Amount   Decimal `json:"amount"`
	Currency string  `json:"currency"`
}

// MarshalJSON writes {"amount":"0.001234","currency":"USD"}.
func (m Money) MarshalJSON() ([]byte, error) {
	return json.Marshal(moneyJSON{Decimal(m.Nanos), m.Currency})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Money) UnmarshalJSON(b []byte) error {
	var j moneyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = Money{int64(j.Amount), j.Currency}
	return nil
}

var errCurrency = errors.New("currencies differ")

// add sums two amounts of the same currency; a zero Money takes the other's
// currency.
func (m Money) add(o Money) (Money, error) {
	switch {
	case m.Currency == "" && m.Nanos == 0:
		return o, nil
	case o.Currency == "" && o.Nanos == 0:
		return m, nil
	case m.Currency != o.Currency:
		return m, fmt.Errorf("%w: %s and %s", errCurrency, m.Currency, o.Currency)
	}
	return Money{m.Nanos + o.Nanos, m.Currency}, nil
}

// acc128 accumulates non-negative products in 128 bits: tokens (≤ 2^63)
// times nanos per million (≤ 2^63) overflow int64 long before they matter.
type acc128 struct{ hi, lo uint64 }

func (a *acc128) addMul(x, y uint64) {
	hi, lo := bits.Mul64(x, y)
	var c uint64
	a.lo, c = bits.Add64(a.lo, lo, 0)
	a.hi, _ = bits.Add64(a.hi, hi, c)
}

// divRound divides by d rounding half up, saturating at MaxInt64 when the
// quotient does not fit (only for absurd inputs: 1e9 tokens at 1e6 per 1M
// tokens is 1e18 nanos, still in range).
func (a acc128) divRound(d uint64) int64 {
	if a.hi >= d {
		return math.MaxInt64
	}
	q, r := bits.Div64(a.hi, a.lo, d)
	if r >= d-r { // r ≥ d/2 without overflow: half rounds up
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
