package emu

// SetDelayAvailable makes Up believe check about the kernel's delay lines
// until restore, for the tests of a lab file asking for delay on a kernel
// that cannot run them.
func SetDelayAvailable(check func() error) (restore func()) {
	real := delayAvailable
	delayAvailable = check
	return func() { delayAvailable = real }
}
