package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestConnectInBackground: with the server down (the fault proxy drops
// every connection), Open fails — what a report wants — but Open with
// Background returns a Store whose every method fails at once with
// store.ErrNotConnected, without a call to the server. Once the server
// answers, the Store connects by itself, creates the database and its
// tables, and works.
func TestConnectInBackground(t *testing.T) {
	needServer(t)
	proxy, fp := newFaultProxy(t)
	fp.mode.Store(int32(down))
	db := fmt.Sprintf("tollgate_test_%d_%d", os.Getpid(), dbSeq.Add(1))
	t.Cleanup(func() {
		if err := adminExec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(db)); err != nil {
			t.Errorf("drop test database %s: %v", db, err)
		}
	})
	cfg := Config{HTTP: proxy.URL, Database: db, Timeout: 2 * time.Second}

	if s, err := Open(t.Context(), cfg, testLogger(t)); err == nil {
		s.Close()
		t.Fatal("Open succeeded with the server down")
	}
	cfg.Background = true
	s, err := Open(t.Context(), cfg, testLogger(t))
	if err != nil {
		t.Fatalf("Open with Background, server down: %v", err)
	}
	defer s.Close()
	if err := s.Connected(); !errors.Is(err, store.ErrNotConnected) {
		t.Fatalf("Connected() = %v, want store.ErrNotConnected", err)
	}
	if s.Version() != (Version{}) {
		t.Errorf("Version() = %v before connecting, want the zero Version", s.Version())
	}
	before := fp.calls.Load()
	n := callEveryMethod(t, s, func(name string, err error) {
		if !errors.Is(err, store.ErrNotConnected) {
			t.Errorf("%s while not connected: %v, want an error wrapping store.ErrNotConnected", name, err)
		}
	})
	if n < 20 {
		t.Errorf("called %d methods; the Store has more", n)
	}
	// A background attempt may have reached the proxy meanwhile; the
	// methods themselves must not (at most the attempts' calls).
	if calls := fp.calls.Load() - before; calls > 2 {
		t.Errorf("%d calls reached the server while %d methods ran not connected", calls, n)
	}

	fp.mode.Store(int32(pass))
	deadline := time.Now().Add(30 * time.Second)
	for s.Connected() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not connected 30 s after the server came back: %v", s.Connected())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if s.Version() == (Version{}) {
		t.Error("connected, but Version() is zero")
	}
	recs := make([]*record.Record, 10)
	for i := range recs {
		recs[i] = storetest.Record(i)
	}
	if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatalf("Insert after connecting: %v", err)
	}
	got, err := s.Requests(t.Context(), store.Filter{Limit: 100})
	if err != nil || len(got) != len(recs) {
		t.Fatalf("Requests after connecting: %d rows, %v; want %d", len(got), err, len(recs))
	}
	if _, err := s.Report(t.Context(), store.ReportQuery{From: time.Now().Add(-24 * time.Hour), To: time.Now()}); err != nil {
		t.Errorf("Report after connecting: %v", err)
	}
}

// callEveryMethod calls each exported method of s that returns an error
// (but Close and Connected) with a context and zero values, and hands
// its error to check: a method added without the connection check fails
// the test above. It returns how many it called.
func callEveryMethod(t *testing.T, s *Store, check func(name string, err error)) int {
	t.Helper()
	ctxType := reflect.TypeFor[context.Context]()
	errType := reflect.TypeFor[error]()
	v := reflect.ValueOf(s)
	n := 0
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		ft := m.Func.Type() // the receiver is argument 0
		if m.Name == "Close" || m.Name == "Connected" || ft.NumOut() == 0 || ft.Out(ft.NumOut()-1) != errType {
			continue
		}
		if ft.NumIn() < 2 || ft.In(1) != ctxType {
			t.Errorf("%s does not take a context first", m.Name)
			continue
		}
		args := []reflect.Value{reflect.ValueOf(t.Context())}
		for j := 2; j < ft.NumIn(); j++ {
			args = append(args, reflect.Zero(ft.In(j)))
		}
		out := v.Method(i).Call(args)
		err, _ := out[len(out)-1].Interface().(error)
		check(m.Name, err)
		n++
	}
	return n
}
