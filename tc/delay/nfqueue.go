package delay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The netfilter queue protocol (linux/netfilter/nfnetlink_queue.h),
// spoken over a raw netlink socket. No Go NFQUEUE library is served by
// this project's module proxy, and the general nfnetlink libraries that are
// allocate per message; a delay line handles up to ~10^5 packets a second
// on a 2-core machine, so this file encodes the few messages it needs into
// reused buffers.
const (
	nfqnlMsgPacket       = 0 // NFQNL_MSG_PACKET: kernel → user
	nfqnlMsgConfig       = 2 // NFQNL_MSG_CONFIG
	nfqnlMsgVerdictBatch = 3 // NFQNL_MSG_VERDICT_BATCH: every queued id ≤ id
	nfqnlMsgVerdict      = 1 // NFQNL_MSG_VERDICT: one id

	nfqaPacketHdr  = 1 // struct nfqnl_msg_packet_hdr: be32 id, be16 proto, u8 hook
	nfqaVerdictHdr = 2 // struct nfqnl_msg_verdict_hdr: be32 verdict, be32 id
	nfqaTimestamp  = 4 // struct nfqnl_msg_packet_timestamp: be64 sec, be64 usec

	nfqaCfgCmd      = 1 // struct nfqnl_msg_config_cmd: u8 cmd, u8 pad, be16 pf
	nfqaCfgParams   = 2 // struct nfqnl_msg_config_params: be32 range, u8 mode (packed)
	nfqaCfgQueueMax = 3 // __be32

	nfqnlCfgCmdBind = 1
	nfqnlCopyPacket = 2 // userspace gets the first copyRange bytes; the packet stays in the kernel
	// copyRange is what the loop reads of each packet: the IPv4 header's
	// first 4 bytes, for its total length (the serialisation time).
	copyRange   = 4
	nfqaPayload = 10

	nfAccept = 1
	nfDrop   = 0
)

// nfq is one netlink socket bound to any number of queues.
type nfq struct {
	fd   int
	seq  uint32
	in   []byte    // receive buffer for acknowledgements
	out  []byte    // verdicts waiting to be sent
	mmsg []mmsghdr // recvmmsg's headers, each over its slice of bufs
	iov  []unix.Iovec
	bufs []byte
}

// mmsghdr is struct mmsghdr (x/sys has recvmmsg's number, not its type).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// recvBatch is how many netlink datagrams one recvmmsg takes, and recvBuf
// the room for each: a packet message with 4 bytes copied is about 100
// bytes.
const (
	recvBatch = 64
	recvBuf   = 1024
)

// openNFQ opens the socket in the calling thread's network namespace.
// Its receive buffer is large: a full buffer makes the kernel drop queued
// packets, which the delay line reports as unrequested drops.
func openNFQ() (*nfq, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	q := &nfq{fd: fd, in: make([]byte, 1<<16), mmsg: make([]mmsghdr, recvBatch), iov: make([]unix.Iovec, recvBatch), bufs: make([]byte, recvBatch*recvBuf)}
	for i := range q.mmsg {
		q.iov[i].Base = &q.bufs[i*recvBuf]
		q.iov[i].SetLen(recvBuf)
		q.mmsg[i].hdr.Iov = &q.iov[i]
		q.mmsg[i].hdr.SetIovlen(1)
	}
	return q, nil
}

func (q *nfq) close() error { return unix.Close(q.fd) }

// header appends a netlink and nfgen header for a message of type msg on
// queue, returning the offset of the length field to patch.
func (q *nfq) header(b []byte, msg uint16, flags uint16, queue uint16) ([]byte, int) {
	q.seq++
	at := len(b)
	b = binary.NativeEndian.AppendUint32(b, 0) // nlmsg_len, patched by end
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.NFNL_SUBSYS_QUEUE)<<8|msg)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|flags)
	b = binary.NativeEndian.AppendUint32(b, q.seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // portid: the kernel's
	b = append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, queue)
	return b, at
}

// attr appends one netlink attribute, padded to 4 bytes.
func attr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func end(b []byte, at int) []byte {
	binary.NativeEndian.PutUint32(b[at:], uint32(len(b)-at))
	return b
}

// bind binds queue to this socket, copying copyRange bytes, with room for maxlen
// packets, and waits for the kernel's acknowledgements.
func (q *nfq) bind(queue uint16, maxlen uint32) error {
	var b []byte
	var at int
	b, at = q.header(b, nfqnlMsgConfig, unix.NLM_F_ACK, queue)
	b = end(attr(b, nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, 0}), at)
	b, at = q.header(b, nfqnlMsgConfig, unix.NLM_F_ACK, queue)
	b = attr(b, nfqaCfgParams, append(binary.BigEndian.AppendUint32(nil, copyRange), nfqnlCopyPacket))
	b = end(attr(b, nfqaCfgQueueMax, binary.BigEndian.AppendUint32(nil, maxlen)), at) // the kernel reads it as __be32 (nfqnl_recv_config)
	if err := unix.Sendto(q.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nfqueue %d: %w", queue, err)
	}
	for acks := 0; acks < 2; {
		n, err := q.recvBlocking()
		if err != nil {
			return fmt.Errorf("nfqueue %d: %w", queue, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(q.in[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR {
				if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
					return fmt.Errorf("nfqueue %d: bind: %w", queue, unix.Errno(-code))
				}
				acks++
			}
		}
	}
	return nil
}

func (q *nfq) recvBlocking() (int, error) {
	for {
		var fds = []unix.PollFd{{Fd: int32(q.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 5000); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, err
		}
		n, _, err := unix.Recvfrom(q.fd, q.in, 0)
		if errors.Is(err, unix.EAGAIN) {
			continue
		}
		return n, err
	}
}

// packet is one queued packet as the kernel reports it.
type packet struct {
	queue uint16
	id    uint32
	tsNS  int64 // when it arrived, ns (CLOCK_REALTIME); 0 if the kernel gave none
	len   int   // its IP length, bytes; 0 if the kernel gave none
}

// receive reads everything the socket holds, recvBatch datagrams per
// system call, without blocking, and calls fn for each queued packet.
func (q *nfq) receive(fn func(packet)) error {
	for {
		// Raw: see Loop.loop.
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(q.fd), uintptr(unsafe.Pointer(&q.mmsg[0])),
			recvBatch, unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == unix.EAGAIN || errno == unix.EINTR:
			return nil
		case errno != 0:
			return errno
		}
		for i := range int(n) {
			parsePackets(q.bufs[i*recvBuf:i*recvBuf+int(q.mmsg[i].len)], fn)
		}
		if n < recvBatch {
			return nil
		}
	}
}

// parsePackets walks the netlink messages in b.
func parsePackets(b []byte, fn func(packet)) {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return
		}
		if typ == uint16(unix.NFNL_SUBSYS_QUEUE)<<8|nfqnlMsgPacket && l >= unix.NLMSG_HDRLEN+4 {
			msg := b[unix.NLMSG_HDRLEN:l]
			p := packet{queue: binary.BigEndian.Uint16(msg[2:4])}
			walkAttrs(msg[4:], func(typ uint16, data []byte) {
				switch {
				case typ == nfqaPacketHdr && len(data) >= 4:
					p.id = binary.BigEndian.Uint32(data)
				case typ == nfqaTimestamp && len(data) >= 16:
					p.tsNS = int64(binary.BigEndian.Uint64(data))*1e9 + int64(binary.BigEndian.Uint64(data[8:]))*1e3
				case typ == nfqaPayload && len(data) >= 4 && data[0]>>4 == 4:
					p.len = int(binary.BigEndian.Uint16(data[2:]))
				}
			})
			fn(p)
		}
		b = b[(l+3)&^3:]
	}
}

func walkAttrs(b []byte, fn func(typ uint16, data []byte)) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[2:])&0x3fff, b[4:l])
		b = b[(l+3)&^3:]
	}
}

// verdict queues a verdict; batch applies it to every packet of the queue
// with an id up to id (NFQNL_MSG_VERDICT_BATCH), else to id alone.
func (q *nfq) verdict(queue uint16, id uint32, v uint32, batch bool) {
	msg := uint16(nfqnlMsgVerdict)
	if batch {
		msg = nfqnlMsgVerdictBatch
	}
	var at int
	q.out, at = q.header(q.out, msg, 0, queue)
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], v)
	binary.BigEndian.PutUint32(hdr[4:], id)
	q.out = end(attr(q.out, nfqaVerdictHdr, hdr[:]), at)
}

// flush sends the queued verdicts in one datagram.
func (q *nfq) flush() error {
	if len(q.out) == 0 {
		return nil
	}
	// Raw (see Loop.loop); the kernel's netlink address is all zero
	// but its family.
	sa := unix.RawSockaddrNetlink{Family: unix.AF_NETLINK}
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(q.fd), uintptr(unsafe.Pointer(&q.out[0])), uintptr(len(q.out)),
		0, uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrNetlink)
	q.out = q.out[:0]
	if errno != 0 {
		return fmt.Errorf("nfqueue verdicts: %w", errno)
	}
	return nil
}

// queueStats reads the kernel's counters of each queue bound in the
// calling thread's namespace: packets it dropped because the queue was
// full (queue_dropped) or the socket could not take them (user_dropped).
func queueStats() (map[uint16][2]uint64, error) {
	b, err := os.ReadFile("/proc/thread-self/net/netfilter/nfnetlink_queue")
	if err != nil {
		return nil, err
	}
	out := map[uint16][2]uint64{}
	for _, line := range splitLines(string(b)) {
		var num, portid, total, mode, rng, qdrop, udrop, seq, one uint64
		if n, _ := fmt.Sscan(line, &num, &portid, &total, &mode, &rng, &qdrop, &udrop, &seq, &one); n >= 7 {
			out[uint16(num)] = [2]uint64{qdrop, udrop}
		}
	}
	return out, nil
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
