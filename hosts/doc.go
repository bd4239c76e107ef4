// Package hosts runs a lab's hosts and the programs on them.
//
// A host is a network namespace mounted at /run/netns/fab.<lab>.<node>.
// With `runtime: netns` (the default) emu makes a bare namespace and
// endpoints are child processes started inside it. With `runtime: docker`
// the Docker runtime registered here runs one container per host
// (NetworkMode none, labelled with the lab) from a locally built FROM
// scratch image, and mounts the container's namespace at the same path, so
// links, capture and `fabric exec` treat both kinds alike; endpoints then
// run in the container through `docker exec`.
//
// Start, StartFabric and Exec work for both runtimes.
package hosts
