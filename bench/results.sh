#!/bin/sh
# Measurement benchmarks (issue 6), for `make bench`:
#  1. LMM matching + statistics on a synthetic 5-million-packet pcap pair:
#     prints matched packets/s (target >= 1,000,000) and the peak RSS, which
#     stays bounded because both captures are streamed.
#  2. Capture overhead (root only): goodput of a saturated shaped port with
#     and without capture on two ports, and their ratio (target >= 0.95).
#     FABRIC_CAPTURE_BENCH_RATE picks the port rate (default 100Mbit).
# FABRIC_LMM_BENCH_PACKETS overrides the pair size.
set -eu
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

packets=${FABRIC_LMM_BENCH_PACKETS:-5000000}
echo "== LMM: synthetic pcap pair of $packets packets (generation not timed)"
FABRIC_LMM_BENCH_PACKETS=$packets go test -run '^$' -bench '^BenchmarkMatch$' -benchtime 1x ./results/lmm/ |
	awk '/^BenchmarkMatch/ {
		for (i = 1; i <= NF; i++) {
			if ($(i+1) == "pkts/s") pps = $i
			if ($(i+1) == "peakRSS-MB") rss = $i
		}
		if ($1 ~ /discard/) {
			printf "LMM matching+statistics: %.0f packets/s (per-packet CSV formatted, discarded; peak RSS %.0f MB)\n", pps, rss
			if (pps < 1000000) { print "  below the 1M packets/s target"; bad = 1 }
		} else {
			printf "LMM with per-packet CSV written to disk: %.0f packets/s (peak RSS %.0f MB)\n", pps, rss
		}
	}
	END { exit bad }'

if [ "$(id -u)" = 0 ]; then
	echo "== capture overhead (${FABRIC_CAPTURE_BENCH_RATE:-100Mbit} port, 3 alternating pairs of 3 s runs)"
	go test -run '^$' -bench '^BenchmarkCaptureOverhead$' -benchtime 3x ./results/capture/ |
		awk '/^BenchmarkCaptureOverhead/ {
			for (i = 1; i <= NF; i++) {
				if ($(i+1) == "Mbps-nocapture") a = $i
				if ($(i+1) == "Mbps-capture") b = $i
				if ($(i+1) == "ratio") r = $i
			}
			printf "capture overhead: %.2f Mbit/s without, %.2f Mbit/s with capture on 2 ports, ratio %.3f\n", a, b, r
		}
		/dropped/ { print }'
else
	echo "== capture overhead: skipped (needs root)"
fi
