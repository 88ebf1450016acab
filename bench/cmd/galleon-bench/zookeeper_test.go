package main

import "testing"

func TestMovedNode(t *testing.T) {
	const dubbo = "dubbo%3A%2F%2F10.0.0.1%3A20880%2Forg.galleon.load.Service00000%3Fanyhost%3Dtrue%26side%3Dprovider"
	node, data, err := movedNode("dubbo", dubbo, nil)
	if want := "dubbo%3A%2F%2F10.252.0.1%3A20880%2Forg.galleon.load.Service00000%3Fanyhost%3Dtrue%26side%3Dprovider"; err != nil || node != want || data != nil {
		t.Errorf("dubbo: %q, %q, %v; want %q, no data", node, data, err, want)
	}
	if _, _, err := movedNode("dubbo", "consumer%3A%2F%2Fhost", nil); err == nil {
		t.Error("a provider node without an address moved without an error")
	}
	in := `{"name":"svc-00000","id":"i-0","address":"10.0.0.1","port":8080,"payload":{"metadata":{"zone":"a"}}}`
	node, data, err = movedNode("curator", "i-0", []byte(in))
	want := `{"name":"svc-00000","id":"bench-moved-i-0","address":"10.252.0.1","port":8080,"payload":{"metadata":{"zone":"a"}}}`
	if err != nil || node != "bench-moved-i-0" || string(data) != want {
		t.Errorf("curator: %q, %s, %v; want bench-moved-i-0, %s", node, data, err, want)
	}
}
