// Package images holds the Dockerfiles of fabric's container images, embedded
// so that the fabric binary can build them without a source checkout.
package images

import _ "embed"

// HostDockerfile builds the image docker-runtime hosts run in: FROM
// scratch plus the static fabric binary, which the build context must hold
// under the name "fabric".
//
//go:embed host/Dockerfile
var HostDockerfile []byte
