// Package results holds fabric's measurement side: packet capture inside lab
// namespaces (capture), reading pcap files (pcapfile), per-packet switch
// latency from two captures (lmm, HULL §5.2's Latency Measurement Module),
// flow completion times and slowdowns from endpoint records (flows), exact
// statistics (stats), plots (plot) and paper-style tables (report).
//
// Nothing here runs traffic; the packages only observe and compute.
package results
