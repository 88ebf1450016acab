package registrytest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// roundTrip sends a line on c and returns the answer or the error.
func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestProxyBreaksAndRestores(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	ctx := context.Background()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "one"); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if err := p.Break(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c, "two"); err == nil {
		t.Fatalf("a connection open at Break still answers: %q", got)
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		got, err := roundTrip(c2, "three")
		c2.Close()
		if err == nil {
			t.Fatalf("a connection made while broken answers: %q", got)
		}
	}
	if err := p.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "four"); err != nil || got != "four\n" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
}

// TestProxySilence: a silent proxy accepts and reads, never answers, on the
// connections open and on new ones; Restore cuts the silenced ones, and new
// connections answer again.
func TestProxySilence(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	ctx := context.Background()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "one"); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if err := p.Silence(ctx); err != nil {
		t.Fatal(err)
	}
	silent := func(c net.Conn, line string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatalf("writing to a silent proxy: %v (it should read)", err)
		}
		var ne net.Error
		got, err := bufio.NewReader(c).ReadString('\n')
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("a silent proxy answered %q, %v; want a read timeout", got, err)
		}
	}
	silent(c, "two")
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a silent proxy refused a connection: %v", err)
	}
	defer c2.Close()
	silent(c2, "three")
	if err := p.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "four"); err != nil || got != "four\n" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
}

// TestListenProxy: a proxy listens where it is told, and says why it cannot.
func TestListenProxy(t *testing.T) {
	target := echoServer(t)
	p := NewProxy(t, target)
	q, err := ListenProxy(t, p.Addr(), target)
	if err == nil || q != nil {
		t.Fatalf("a second proxy on %s: %v, %v; want an error", p.Addr(), q, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	q, err = ListenProxy(t, addr, target)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	if q.Addr() != addr {
		t.Fatalf("Addr %s, want %s", q.Addr(), addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
}
