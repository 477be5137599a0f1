package record

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// TestBinaryReadsV1 reads the form an older queue holds (fixed lists, no
// lengths): the fields it had come back, the ones added since are zero.
func TestBinaryReadsV1(t *testing.T) {
	want := Record{RequestID: "req_1", Model: "m", Attempt: 2, Status: 200}
	want.Usage.InputTokens = 7
	b := []byte{BinaryMagicV1}
	strs, ints, int64s := want.strs(), want.ints(), want.int64s()
	for _, p := range strs[:v1Strs] {
		b = appendStr(b, *p)
	}
	for _, p := range ints[:v1Ints] {
		b = binary.AppendVarint(b, int64(*p))
	}
	for _, p := range int64s[:v1Int64s] {
		b = binary.AppendVarint(b, *p)
	}
	b = binary.AppendUvarint(b, 0) // no flags
	var got Record
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	want.Finish()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 entry read as %+v, want %+v", got, want)
	}
}

// TestBinaryRefusesNewerLists: an entry with more fields than this reader
// knows is refused, not read with the extra fields silently dropped.
func TestBinaryRefusesNewerLists(t *testing.T) {
	var r Record
	b := binary.AppendUvarint([]byte{BinaryMagic}, uint64(len(r.strs())+1))
	if err := r.UnmarshalBinary(b); err == nil || !strings.Contains(err.Error(), "newer version") {
		t.Fatalf("got %v, want a refusal naming a newer version", err)
	}
}
