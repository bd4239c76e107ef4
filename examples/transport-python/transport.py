#!/usr/bin/env python3
"""A complete transport for fabric in Python 3's standard library, written
to be read. It speaks the transport contract (docs/transport-contract.md)
and nothing else of fabric's: a schedule in, records out.

Messages travel as UDP datagrams of this transport's own protocol, one
socket per host:

    DATA  kind 1, message id, packet number, message size, payload
    ACK   kind 2, message id, packet number

A message is cut into packets of at most one MTU. A sender keeps at most
`window` packets unacknowledged towards each peer (FABRIC_ARGS
{"window": N}, 16 by default), shared by its messages to that peer, the
one with the fewest packets left to send first; it sends a packet again
when its ACK has not come within the retransmission timeout, which
follows the round trips measured to that peer (RFC 6298) and doubles with
each resend of the packet. The receiver ACKs every DATA
packet, keeps which packets of each message it has, records the message
once, when it has them all, and ACKs a copy that comes after that again:
a lost ACK costs a resend, never a second record.

One thread, one socket, one selector: the process sleeps until a
datagram arrives, a message is due or a timer expires, and SIGTERM wakes
it through the selector too.
"""

import heapq
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

DATA, ACK = 1, 2
HEADER = struct.Struct("!BQIQ")  # kind, message id, packet number, message size (0: a stream)
ACK_HEADER = struct.Struct("!BQI")
IP_UDP_HEADERS = 28
SAMPLE_NS = 100_000_000  # a stream's receiver writes a sample every 100 ms
MAX_RTO_NS = 1_000_000_000
RECEIVE_BATCH = 64


def now():
    """CLOCK_REALTIME in ns: the clock of FABRIC_START_NS and the records."""
    return time.time_ns()


class Peer:
    """A host this one sends to: its window, shared by the messages to it,
    and its retransmission timeout (RFC 6298), in ns."""

    def __init__(self, addr, rtt_ns, window_ns):
        self.addr = addr
        self.inflight = 0  # packets sent and not yet ACKed
        self.sending = []  # its messages with packets not yet sent
        self.srtt = self.rttvar = None
        # A window sent at once waits in this host's queue for its own
        # length, and an interpreter on a busy machine answers late: the
        # floor keeps neither from passing for a loss.
        self.floor = max(2 * (rtt_ns + window_ns), 20_000_000)
        self.initial = max(4 * rtt_ns, 200_000_000)

    def sample(self, r):
        if self.srtt is None:
            self.srtt, self.rttvar = r, r / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - r)
            self.srtt = 0.875 * self.srtt + 0.125 * r

    def timeout(self, tries):
        base = self.initial if self.srtt is None else max(self.srtt + 4 * self.rttvar, self.floor)
        return int(min(base * 2**tries, MAX_RTO_NS))


class Outgoing:
    """A message this host sends: its next packet and those not yet ACKed."""

    def __init__(self, m, packets, peer):
        self.m = m
        self.peer = peer
        self.stream = bool(m.get("stream"))
        self.packets = packets  # None for a stream, which never ends
        self.next = 0
        self.unacked = {}  # packet number -> (sent at, resends so far)
        self.acked = 0

    def left(self):
        """Packets not yet sent once: a stream's never run out."""
        return float("inf") if self.stream else self.packets - self.next


class Incoming:
    """A message this host receives: every packet below base has come, and
    those in above."""

    def __init__(self, m, packets):
        self.m = m
        self.packets = packets
        self.base = 0
        self.above = set()
        self.bytes = 0
        self.last_ns = 0
        self.recorded = False

    def add(self, n, length, t):
        """Counts packet n; False when it is a copy of one already here."""
        if n < self.base or n in self.above:
            return False
        self.above.add(n)
        while self.base in self.above:
            self.above.remove(self.base)
            self.base += 1
        self.bytes += length
        self.last_ns = t
        return True


class Transport:
    def __init__(self, env):
        args = json.loads(env.get("FABRIC_ARGS") or "{}")
        self.window = int(args.get("window", 16))
        self.port = int(args.get("port", 7300))
        self.host = env["FABRIC_HOST"]
        self.start_ns = int(env["FABRIC_START_NS"])
        self.rtt_ns = int(env.get("FABRIC_RTT_NS") or 0)
        mtu = int(env["FABRIC_MTU"])
        self.payload = mtu - IP_UDP_HEADERS - HEADER.size
        # How long a window of full packets takes at this host's link rate.
        self.window_ns = self.window * mtu * 8 * 1_000_000_000 // int(env["FABRIC_LINK_RATE_BPS"])
        self.zeros = bytes(self.payload)
        schedule = read_schedule(env["FABRIC_SCHEDULE"])
        self.due = sorted((m for m in schedule if m["src"] == self.host), key=lambda m: m["t_ns"])
        self.next_due = 0  # the first of self.due not started yet
        self.receives = {m["id"]: m for m in schedule if m["dst"] == self.host}
        self.records = open(env["FABRIC_RECORDS"], "a", buffering=1 << 16)

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock.bind((env["FABRIC_ADDR"], self.port))
        self.sock.setblocking(False)
        self.tos = 0
        # SIGTERM ends the loop; the wake-up socket makes it end a sleep.
        self.stopping = False
        self.wake, self.wake_w = socket.socketpair()
        self.wake.setblocking(False)
        self.wake_w.setblocking(False)
        signal.set_wakeup_fd(self.wake_w.fileno())
        signal.signal(signal.SIGTERM, self.stop)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ)
        self.selector.register(self.wake, selectors.EVENT_READ)

        self.out = {}  # message id -> Outgoing
        self.inc = {}  # message id -> Incoming
        self.timers = []  # heap of (due ns, tie, message id, packet number, resends)
        self.ties = 0
        self.peers = {}  # address -> Peer
        self.next_sample = self.start_ns + SAMPLE_NS
        self.streams_in = any(m.get("stream") for m in self.receives.values())
        self.sends = self.late = self.late_sum = self.late_max = 0
        self.count = {"data_sent": 0, "retransmitted": 0, "duplicates": 0}

    def stop(self, signum, frame):
        self.stopping = True

    def packets(self, m):
        """How many packets a message takes (None: a stream, no end)."""
        if m.get("stream"):
            return None
        return max(1, -(-m["size"] // self.payload))

    def run(self):
        print("ready", flush=True)  # the contract's ready line
        while not self.stopping:
            t = now()
            self.start_due(t)
            self.expire(t)
            if self.streams_in and t >= self.next_sample:
                self.sample(t)
            wait = self.next_event()
            timeout = None if wait is None else max(0, wait - now()) / 1e9
            for key, _ in self.selector.select(timeout):
                if key.fileobj is self.sock:
                    self.receive()
                else:
                    self.wake.recv(64)
        self.finish()

    def next_event(self):
        """When the loop must next wake without a datagram (ns), or None."""
        while self.timers and self.stale(self.timers[0]):
            heapq.heappop(self.timers)  # no wake-up for a packet ACKed since
        times = []
        if self.next_due < len(self.due):
            times.append(self.start_ns + self.due[self.next_due]["t_ns"])
        if self.timers:
            times.append(self.timers[0][0])
        if self.streams_in:
            times.append(self.next_sample)
        return min(times) if times else None

    def start_due(self, t):
        """Starts every message whose time has come (open loop)."""
        while self.next_due < len(self.due) and self.start_ns + self.due[self.next_due]["t_ns"] <= t:
            m = self.due[self.next_due]
            self.next_due += 1
            late = t - (self.start_ns + m["t_ns"])
            self.sends += 1
            self.late_sum += late
            self.late_max = max(self.late_max, late)
            self.late += late > 1_000_000
            peer = self.peer(m["dst_addr"])
            o = Outgoing(m, self.packets(m), peer)
            self.out[m["id"]] = o
            peer.sending.append(o)
            self.fill(peer)

    def fill(self, peer):
        """Sends new packets to a peer while its window has room, each of
        the message with the fewest packets left to send."""
        while peer.inflight < self.window and peer.sending:
            o = min(peer.sending, key=Outgoing.left)
            self.send_data(o, o.next, 0)
            o.next += 1
            peer.inflight += 1
            if o.left() == 0:
                peer.sending.remove(o)

    def send_data(self, o, n, resends):
        m = o.m
        size = m["size"]
        length = self.payload if o.stream else max(0, min(self.payload, size - n * self.payload))
        self.set_tos(m.get("dscp", 0) << 2)
        try:
            self.sock.sendto(HEADER.pack(DATA, m["id"], n, size) + self.zeros[:length], (m["dst_addr"], self.port))
        except OSError:
            pass  # a full socket buffer: the timer sends it again
        t = now()
        o.unacked[n] = (t, resends)
        self.count["data_sent"] += 1
        self.ties += 1
        heapq.heappush(self.timers, (t + o.peer.timeout(resends), self.ties, m["id"], n, resends))

    def set_tos(self, tos):
        if tos != self.tos:
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            self.tos = tos

    def peer(self, addr):
        if addr not in self.peers:
            self.peers[addr] = Peer(addr, self.rtt_ns, self.window_ns)
        return self.peers[addr]

    def stale(self, timer):
        """Whether a timer's packet was ACKed, or sent again, since."""
        _, _, mid, n, resends = timer
        o = self.out.get(mid)
        sent = o and o.unacked.get(n)
        return not sent or sent[1] != resends

    def expire(self, t):
        """Sends again every packet whose ACK is overdue."""
        while self.timers and self.timers[0][0] <= t:
            timer = heapq.heappop(self.timers)
            if self.stale(timer):
                continue
            _, _, mid, n, resends = timer
            self.count["retransmitted"] += 1
            self.send_data(self.out[mid], n, resends + 1)

    def receive(self):
        """Handles the datagrams waiting, up to a batch: the loop must get
        back to its clock while a busy peer keeps the socket full."""
        for _ in range(RECEIVE_BATCH):
            try:
                b, addr = self.sock.recvfrom(65536)
            except BlockingIOError:
                return
            if b[0] == DATA and len(b) >= HEADER.size:
                self.on_data(b, addr)
            elif b[0] == ACK and len(b) >= ACK_HEADER.size:
                self.on_ack(b, addr)

    def on_data(self, b, addr):
        _, mid, n, _ = HEADER.unpack_from(b)
        m = self.receives.get(mid)
        if m is None:
            return  # not a message of this host's schedule
        self.set_tos(m.get("dscp", 0) << 2)
        try:
            self.sock.sendto(ACK_HEADER.pack(ACK, mid, n), addr)
        except OSError:
            pass  # the sender sends it again
        inc = self.inc.get(mid)
        if inc is None:
            inc = self.inc[mid] = Incoming(m, self.packets(m))
        t = now()
        if inc.recorded or not inc.add(n, len(b) - HEADER.size, t):
            self.count["duplicates"] += 1
            return
        if inc.packets is not None and inc.base == inc.packets:
            self.record(inc, t)

    def on_ack(self, b, addr):
        _, mid, n = ACK_HEADER.unpack_from(b)
        o = self.out.get(mid)
        sent = o and o.unacked.pop(n, None)
        if not sent:
            return  # a copy, or a message already done
        if sent[1] == 0:  # Karn: time only packets sent once
            o.peer.sample(now() - sent[0])
        o.acked += 1
        o.peer.inflight -= 1
        if not o.stream and o.acked == o.packets:
            del self.out[mid]
        self.fill(o.peer)

    def record(self, inc, end_ns):
        """The message's flow record, once: from its scheduled start."""
        m = inc.m
        rec = {"type": "flow", "id": m["id"], "pattern": m["pattern"], "src": m["src"], "dst": m["dst"],
               "size": m["size"], "bytes": inc.bytes, "dscp": m.get("dscp", 0), "cc": "python-udp",
               "start_ns": self.start_ns + m["t_ns"], "end_ns": end_ns}
        for optional in ("class", "query"):
            if optional in m:
                rec[optional] = m[optional]
        self.write(rec)
        inc.recorded = True
        inc.above = set()

    def sample(self, t):
        """Every 100 ms after the start, the bytes of each incoming stream."""
        for inc in self.inc.values():
            if inc.packets is None:
                m = inc.m
                self.write({"type": "sample", "flow_id": m["id"], "src": m["src"], "dst": m["dst"],
                            "t_ns": t, "bytes": inc.bytes})
        while self.next_sample <= t:
            self.next_sample += SAMPLE_NS

    def write(self, rec):
        self.records.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def finish(self):
        """At SIGTERM: what arrived of every message not yet recorded (the
        streams, and any cut off), the lateness, the counts; then exit."""
        for inc in self.inc.values():
            if not inc.recorded:
                self.record(inc, inc.last_ns)
        mean = self.late_sum // self.sends if self.sends else 0
        self.write({"type": "sender", "host": self.host, "sends": self.sends, "late_over_1ms": self.late,
                    "late_mean_ns": mean, "late_max_ns": self.late_max})
        for name, value in self.count.items():
            self.write({"type": "metric", "name": name, "value": value, "unit": "packets"})
        self.records.close()


def read_schedule(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    try:
        Transport(os.environ).run()
    except Exception as e:  # the log (stderr) says why; fabric names the host
        print(f"transport-python: {e!r}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
