// Package transport is the contract between fabric's experiments and the
// transports that carry their traffic: a schedule of messages in, records
// out. fabric's own transports (hosts/transport/tcp, homa, ndp) speak it
// exactly as a user's program does, so every transport runs in every
// experiment through one path. docs/transport-contract.md is the
// language-neutral statement; this package is its Go binding.
//
// A transport is one process per host, started inside the host's network
// namespace (or container) with the environment that Env describes:
//
//  1. It reads its schedule: JSON lines of Message, the messages this host
//     sends (Src is the host) and those it will receive (Dst is the host).
//  2. It prints the line "ready" on stdout once it can receive, before
//     Env.StartNS.
//  3. It sends each of its messages at Env.StartNS + Message.TimeNS (open
//     loop: a message never waits for an earlier one), and writes a Flow
//     record for every message it receives, with StartNS the scheduled
//     send time and EndNS the delivery of its last byte.
//  4. On SIGTERM it flushes its records and exits 0.
//
// Serve is that life for a transport written in Go, which supplies only
// its Endpoint; fabric's own transports are served so.
//
// Version is the contract's version. The schedule, the environment and the
// records change only by adding fields, so a transport written against
// version 1 keeps working.
package transport

// Version of the contract, passed as FABRIC_CONTRACT.
const Version = 1

// ReadyLine is what a transport prints on stdout, alone on a line, once it
// is listening.
const ReadyLine = "ready"
