package cost

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func TestParseDecimal(t *testing.T) {
	good := []struct {
		in   string
		want Decimal
	}{
		{"0.1", 100000000}, // the float trap: exactly 1e8 nanos
		{"0.15", 150000000},
		{"2.50", 2500000000},
		{"3", 3000000000},
		{"0", 0},
		{"000.000", 0},
		{"0.000000001", 1},
		{"0.123456789", 123456789},
		{"+1.5", 1500000000},
		{"-0.5", -500000000}, // signs parse; prices reject them in Validate
		{" 7.25 ", 7250000000},
		{"9223372036.854775807", math.MaxInt64},
		{"-9223372036.854775807", -math.MaxInt64},
		{"00012", 12000000000},
	}
	for _, c := range good {
		got, err := ParseDecimal(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDecimal(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, err string }{
		{"", `must be a decimal number such as 0.15; got ""`},
		{"-", `must be a decimal number such as 0.15; got "-"`},
		{"abc", `must be a decimal number such as 0.15; got "abc"`},
		{"1.", `must be a decimal number such as 0.15; got "1."`},
		{".5", `must be a decimal number such as 0.15; got ".5"`},
		{"1.2.3", `must be a decimal number such as 0.15; got "1.2.3"`},
		{"1,5", `must be a decimal number such as 0.15; got "1,5"`},
		{"--1", `must be a decimal number such as 0.15; got "--1"`},
		{"0x10", `must be a decimal number such as 0.15; got "0x10"`},
		{"1e-3", `must be a plain decimal such as 0.001, without an exponent; got "1e-3"`},
		{"2E6", `must be a plain decimal such as 0.001, without an exponent; got "2E6"`},
		{"NaN", `must be a finite decimal number; got "NaN"`},
		{".nan", `must be a finite decimal number; got ".nan"`},
		{"-.inf", `must be a finite decimal number; got "-.inf"`},
		{"Infinity", `must be a finite decimal number; got "Infinity"`},
		{"0.1234567891", `must have at most 9 decimal places; got "0.1234567891"`},
		{"9223372036.854775808", `is too large (at most 9223372036.854775807); got "9223372036.854775808"`},
		{"10000000000", `is too large (at most 9223372036.854775807); got "10000000000"`},
		{"99999999999999999999999", `is too large (at most 9223372036.854775807); got "99999999999999999999999"`},
	}
	for _, c := range bad {
		_, err := ParseDecimal(c.in)
		if err == nil || err.Error() != c.err {
			t.Errorf("ParseDecimal(%q) error:\n got %v\nwant %s", c.in, err, c.err)
		}
	}
}

func TestDecimalString(t *testing.T) {
	for _, c := range []struct {
		d    Decimal
		want string
	}{
		{150000000, "0.15"}, {3 * One, "3"}, {1, "0.000000001"}, {-1, "-0.000000001"}, {0, "0"},
		{math.MaxInt64, "9223372036.854775807"}, {math.MinInt64, "-9223372036.854775808"},
	} {
		if got := c.d.String(); got != c.want {
			t.Errorf("Decimal(%d).String() = %q; want %q", int64(c.d), got, c.want)
		}
	}
}

func TestMoneyString(t *testing.T) {
	for _, c := range []struct {
		m    Money
		want string
	}{
		{Money{1234000, "USD"}, "0.001234 USD"},
		{Money{1500000000, "CNY"}, "1.50 CNY"},
		{Money{0, "USD"}, "0.00 USD"},
		{Money{-25, "USD"}, "-0.000000025 USD"},
		{Money{12 * int64(One), ""}, "12.00"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("%#v.String() = %q; want %q", c.m, got, c.want)
		}
	}
}

func TestDecimalYAML(t *testing.T) {
	var v struct {
		A Decimal  `yaml:"a"`
		B Decimal  `yaml:"b"`
		C *Decimal `yaml:"c"`
		D *Decimal `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("a: 0.1\nb: \"2.50\"\nc: 3\n"), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 100000000 || v.B != 2500000000 || v.C == nil || *v.C != 3*One || v.D != nil {
		t.Errorf("decoded %+v", v)
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a: 0.1\nb: 2.5\nc: 3\nd: null\n"; string(out) != want {
		t.Errorf("marshal:\n got %q\nwant %q", out, want)
	}
	// Every bad value is reported, with its line.
	err = yaml.Unmarshal([]byte("a: 1e-3\nb: 0.0000000001\n"), &v)
	want := "yaml: unmarshal errors:\n  line 1: must be a plain decimal such as 0.001, without an exponent; got \"1e-3\"\n  line 2: must have at most 9 decimal places; got \"0.0000000001\""
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	// An empty value is "not given", so a required price is caught by Validate.
	v.C = nil
	if err := yaml.Unmarshal([]byte("c:\nd: null\n"), &v); err != nil || v.C != nil || v.D != nil {
		t.Errorf("null decoded as %v, %v (%v)", v.C, v.D, err)
	}
	if err := yaml.Unmarshal([]byte("a: [1]\n"), &v); err == nil {
		t.Error("a list decoded as a decimal")
	}
}

func TestMoneyJSON(t *testing.T) {
	m := Money{1234000, "USD"}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"amount":"0.001234","currency":"USD"}`; string(b) != want {
		t.Errorf("json %s; want %s", b, want)
	}
	var back Money
	if err := json.Unmarshal(b, &back); err != nil || back != m {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	// A bare JSON number is read as written, not through float64.
	if err := json.Unmarshal([]byte(`{"amount":0.1,"currency":"USD"}`), &back); err != nil || back.Nanos != 100000000 {
		t.Errorf("number amount: %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"amount":"1e3"}`), &back); err == nil {
		t.Error("accepted an exponent")
	}
}

func TestCostJSON(t *testing.T) {
	b, _ := json.Marshal(Cost{Nanos: 42, Currency: "USD", PriceVersion: "m@*@always#00000000"})
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"nanos": float64(42), "currency": "USD", "price_version": "m@*@always#00000000"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cost JSON (-want +got):\n%s", diff)
	}
}

func TestDivRound(t *testing.T) {
	for _, c := range []struct {
		x, y uint64
		want int64
	}{
		{1, 499999, 0},  // 0.499999 nanos rounds down
		{1, 500000, 1},  // exactly half rounds up
		{1, 1500000, 2}, // 1.5 → 2
		{3, 333333, 1},  // 0.999999
		{1e9, 1e15, 1e18},
	} {
		var a acc128
		a.addMul(c.x, c.y)
		if got := a.divRound(1e6); got != c.want {
			t.Errorf("%d×%d/1e6 = %d; want %d", c.x, c.y, got, c.want)
		}
	}
	var a acc128
	a.addMul(math.MaxUint64, math.MaxUint64)
	if got := a.divRound(1e6); got != math.MaxInt64 {
		t.Errorf("overflow gave %d; want saturation", got)
	}
}
