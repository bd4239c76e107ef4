package snmp

import "testing"

// A counter is read from the values line that follows its protocol's
// names line; an unknown counter or protocol is an error.
func TestField(t *testing.T) {
	text := "Ip: Forwarding DefaultTTL\nIp: 1 64\n" +
		"Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n" +
		"Udp: 120 3 7 118 7 0\n" +
		"UdpLite: InDatagrams RcvbufErrors\nUdpLite: 0 9\n"
	for field, want := range map[string]int{"InDatagrams": 120, "RcvbufErrors": 7, "SndbufErrors": 0} {
		if got, err := Field(text, "Udp:", field); err != nil || got != want {
			t.Errorf("Udp %s = %d, %v; want %d", field, got, err, want)
		}
	}
	if _, err := Field(text, "Udp:", "NoSuchCounter"); err == nil {
		t.Error("an unknown counter was read")
	}
	if _, err := Field(text, "Tcp:", "InDatagrams"); err == nil {
		t.Error("a protocol not in the text was read")
	}
}
