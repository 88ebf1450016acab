package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestGenWindow(t *testing.T) {
	log := filepath.Join(t.TempDir(), "eureka-generate.log")
	report := func(at string, changes int, behind int, late string) string {
		return "eureka-generate: " + at + ": 60 renewals (0 failed, 0 re-registered after a 404, 0 first ones before the server listed the instance), " +
			strconv.Itoa(changes) + " changes (0 failed, at most " + strconv.Itoa(behind) + " behind schedule); renewals at worst " + late + " late\n"
	}
	text := "registered 100 applications ...\n" + report("5s", 10, 0, "100ms") + report("10s", 20, 3, "1.5s") + report("15s", 30, 1, "99ms")
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := genWindow(log, 0, 5*time.Second), (genChurn{"10", "3", "1.50"}); got != want {
		t.Errorf("all reports: %+v, want %+v", got, want)
	}
	if got, want := genWindow(log, 2, 10*time.Second), (genChurn{"20", "3", "1.50"}); got != want {
		t.Errorf("after line 2: %+v, want %+v", got, want)
	}
	if got, want := genWindow(log, 3, 5*time.Second), (genChurn{"?", "?", "?"}); got != want {
		t.Errorf("one report: %+v, want %+v", got, want)
	}
}

// The full poller counts the bytes as they came over the wire: gzip, not decoded.
func TestFullPollerCountsWireBytes(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(bytes.Repeat([]byte(`{"applications":{}}`), 1000))
	_ = w.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" || r.Header.Get("Accept-Encoding") != "gzip" {
			http.Error(rw, "want Accept: application/json and Accept-Encoding: gzip", http.StatusBadRequest)
			return
		}
		rw.Header().Set("Content-Encoding", "gzip")
		_, _ = rw.Write(gz.Bytes())
	}))
	defer srv.Close()
	first, err := getFull(context.Background(), fullClient(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if first.bytes != int64(gz.Len()) || first.encoding != "gzip" {
		t.Errorf("one GET: %d bytes, Content-Encoding %q; want %d, gzip", first.bytes, first.encoding, gz.Len())
	}
	log := filepath.Join(t.TempDir(), "full-poller.log")
	stop, err := startFullPoller(context.Background(), srv.URL, 20*time.Millisecond, log)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(110 * time.Millisecond)
	stop()
	st, err := readPollerLog(log)
	if err != nil {
		t.Fatal(err)
	}
	if st.polls < 3 || st.failed != 0 || st.bytes != float64(gz.Len()) {
		t.Errorf("poller: %d polls, %d failed, %.0f bytes each; want 3 or more, 0, %d", st.polls, st.failed, st.bytes, gz.Len())
	}
}

func TestReadPollerLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "full-poller.log")
	if err := os.WriteFile(log, []byte("100 0.010000\nfailed\n300 0.030000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := readPollerLog(log)
	if err != nil {
		t.Fatal(err)
	}
	if st.polls != 2 || st.failed != 1 || st.bytes != 200 || st.ms != 20 {
		t.Errorf("got %+v, want 2 polls, 1 failed, 200 bytes, 20 ms", st)
	}
	if err := os.WriteFile(log, []byte("failed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPollerLog(log); err == nil {
		t.Error("a log of failures only gave no error")
	}
}
