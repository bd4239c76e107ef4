package tc

// ForgetLoadedForTest drops this process's handles on lab's programs and
// maps without unpinning anything: afterwards the process is in the state
// of one that did not build the lab (`fabric port`, a later `fabric run`).
func ForgetLoadedForTest(lab string) {
	loaded.Lock()
	defer loaded.Unlock()
	if o := loaded.labs[lab]; o != nil {
		o.Close()
		delete(loaded.labs, lab)
	}
}
