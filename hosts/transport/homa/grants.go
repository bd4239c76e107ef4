package homa

import "container/heap"

// grantQueue holds the incoming messages that still need grants (granted
// less than their size) in the order the receiver's scheduler ranks them:
// fewest bytes left first, then by ID (SRPT, §3.4). The first k, the
// degree of overcommitment, are the active messages, in order in a short
// slice; the others wait in a min-heap. A DATA packet changes one
// message's rank, only ever towards the front, so keeping the order costs
// O(k + log n) per packet, where sorting every incoming message on each
// packet costs O(n log n).
type grantQueue struct {
	k       int
	active  []*inMsg // the k (or fewer) first, in order
	waiting waitHeap // the rest
}

// Where a message is in the queue (inMsg.queued).
const (
	notQueued = iota
	inActive
	inWaiting
)

func newGrantQueue(k int) grantQueue { return grantQueue{k: k, active: make([]*inMsg, 0, k)} }

// before is the scheduler's order.
func before(a, b *inMsg) bool {
	return a.remaining() < b.remaining() || (a.remaining() == b.remaining() && a.id < b.id)
}

// add queues a message that needs grants.
func (q *grantQueue) add(im *inMsg) {
	if len(q.active) == q.k {
		last := q.active[q.k-1]
		if !before(im, last) {
			heap.Push(&q.waiting, im)
			return
		}
		q.active = q.active[:q.k-1]
		heap.Push(&q.waiting, last)
	}
	im.queued = inActive
	q.active = append(q.active, im)
	q.rise(len(q.active) - 1)
}

// moved restores the order after im received bytes (its rank can only
// rise).
func (q *grantQueue) moved(im *inMsg) {
	switch im.queued {
	case inActive:
		q.rise(q.indexOf(im))
	case inWaiting:
		heap.Fix(&q.waiting, im.heapIndex)
		if top := q.waiting[0]; len(q.active) < q.k || before(top, q.active[len(q.active)-1]) {
			heap.Pop(&q.waiting)
			q.add(top)
		}
	}
}

// remove takes a message out of the queue, if it is in it: it is fully
// granted, or complete. The first waiting message takes an active place
// it leaves.
func (q *grantQueue) remove(im *inMsg) {
	switch im.queued {
	case inActive:
		i := q.indexOf(im)
		q.active = append(q.active[:i], q.active[i+1:]...)
		if len(q.waiting) > 0 {
			next := heap.Pop(&q.waiting).(*inMsg)
			next.queued = inActive
			q.active = append(q.active, next) // it follows every active one
		}
	case inWaiting:
		heap.Remove(&q.waiting, im.heapIndex)
	}
	im.queued = notQueued
}

// rise moves active[i] towards the front to its place.
func (q *grantQueue) rise(i int) {
	for ; i > 0 && before(q.active[i], q.active[i-1]); i-- {
		q.active[i], q.active[i-1] = q.active[i-1], q.active[i]
	}
}

func (q *grantQueue) indexOf(im *inMsg) int {
	for i, a := range q.active {
		if a == im {
			return i
		}
	}
	panic("homa: an active message is not in the active list")
}

// waitHeap is a min-heap of messages in the scheduler's order; each
// message knows its index.
type waitHeap []*inMsg

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return before(h[i], h[j]) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *waitHeap) Push(x any) {
	im := x.(*inMsg)
	im.heapIndex, im.queued = len(*h), inWaiting
	*h = append(*h, im)
}
func (h *waitHeap) Pop() any {
	old := *h
	im := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	im.heapIndex, im.queued = -1, notQueued
	return im
}
