import CGStreamer
import Foundation
import MatteEngine

/// mode=async with `async-delay`: the thread that lets held frames go on their own deadline, not
/// when the next input happens to arrive. It sleeps until the oldest frame's deadline, or until
/// something may let it go sooner (its own alpha finished, a new frame), and pushes it downstream.
/// The streaming thread meets it where order or room matters: a full queue (it waits for room:
/// upstream is held back, as by a `queue` with leaky=no), a serialized event (one the base class only
/// forwards waits behind the held frames and is pushed after them; a segment or a new stream waits on
/// the streaming thread until they have left), renegotiation (never while a frame is produced or
/// pushed), and EOS or new caps (everything leaves now).
final class FrameReleaser {
    /// What the release thread is to do next.
    enum Step {
        /// Push this frame's output (the buffer reference passes on), or nothing when producing it failed,
        /// then the events that came after the frame.
        case push(UnsafeMutablePointer<GstBuffer>?, GstFlowReturn, then: [OwnedEvent])
        /// Sleep until this monotonic time (ms), or until poked.
        case waitUntil(Double)
        /// Nothing held: sleep until poked.
        case idle
        /// This releaser is no longer the stream's (new caps, stop): end the thread.
        case retire
    }

    private let condition = NSCondition()
    /// Held while a frame is produced and pushed, and by the streaming thread while it renegotiates:
    /// a frame is rendered and pushed entirely under one set of caps.
    private let exclusive = NSLock()
    // Guarded by `condition`.
    private var running = false
    private var poked = false
    private var departures = 0
    private var flushing = false
    /// A frame taken from the queue and not yet pushed: the queue alone does not say "all gone".
    private var pushing = false
    /// The last flow return of a push that was not OK (nor FLUSHING), for the streaming thread.
    private var downstreamFlow: GstFlowReturn?
    private var thread: Thread?

    /// One step (decided under the stream lock by the element) and the push.
    private let next: (FrameReleaser) -> Step
    private let push: (UnsafeMutablePointer<GstBuffer>) -> GstFlowReturn
    private let pushEvent: (OwnedEvent) -> Bool

    init(next: @escaping (FrameReleaser) -> Step, push: @escaping (UnsafeMutablePointer<GstBuffer>) -> GstFlowReturn,
         pushEvent: @escaping (OwnedEvent) -> Bool) {
        self.next = next
        self.push = push
        self.pushEvent = pushEvent
    }

    func start() {
        condition.withLock {
            guard !running else { return }
            running = true
            let worker = Thread { [self] in work() }
            worker.name = "matanyone-release"
            thread = worker
            worker.start()
        }
    }

    /// Ends the thread and waits for it. Never under the stream lock: the thread takes it.
    func stop() {
        condition.lock()
        running = false
        condition.broadcast()
        while thread != nil { condition.wait() }
        condition.unlock()
    }

    /// Something changed that may let a frame go sooner (a new frame, a finished alpha, a drain).
    func poke() {
        condition.withLock {
            poked = true
            condition.broadcast()
        }
    }

    /// FLUSH_START (true) to FLUSH_STOP (false): waiters give up, pushes are not retried.
    func setFlushing(_ value: Bool) {
        condition.withLock {
            flushing = value
            if !value { downstreamFlow = nil }  // (a failure from before a seek is no longer news)
            condition.broadcast()
        }
    }

    var isFlushing: Bool { condition.withLock { flushing } }

    /// The flow of the last failed push (NOT_LINKED, EOS, an error downstream), taken once.
    func takeDownstreamFlow() -> GstFlowReturn? {
        condition.withLock {
            defer { downstreamFlow = nil }
            return downstreamFlow
        }
    }

    /// Waits until `done` holds (checked after every departure, and at least every 50 ms), or the
    /// releaser flushes or stops: false then.
    func waitUntil(_ done: () -> Bool) -> Bool {
        while true {
            if done() { return true }
            condition.lock()
            let seen = departures
            while running, !flushing, departures == seen, condition.wait(until: Date().addingTimeInterval(0.05)) {}
            let gone = !running || flushing
            condition.unlock()
            if gone { return done() }
        }
    }

    /// Runs `body` while no frame is being produced or pushed (the streaming thread's renegotiation).
    func exclusively<Result>(_ body: () -> Result) -> Result { exclusive.withLock(body) }

    private func work() {
        while true {
            let step = exclusive.withLock { () -> Step in
                let step = next(self)
                if case let .push(buffer, produced, events) = step {
                    let flow = buffer.map(push) ?? produced
                    for event in events { _ = pushEvent(event) }
                    condition.withLock {
                        pushing = false
                        departures += 1
                        if flow != GST_FLOW_OK, flow != GST_FLOW_FLUSHING { downstreamFlow = flow }
                        condition.broadcast()
                    }
                }
                return step
            }
            switch step {
            case .retire:
                condition.withLock { running = false }  // (ends below)
            case .push:
                break
            case let .waitUntil(deadlineMs):
                sleep(untilMs: deadlineMs)
            case .idle:
                sleep(untilMs: nil)
            }
            let stopping = condition.withLock { !running }
            if stopping {
                condition.withLock {
                    thread = nil
                    condition.broadcast()
                }
                return
            }
        }
    }

    var isPushing: Bool { condition.withLock { pushing } }

    /// Marks a frame as taken from the queue (called by `next` under the stream lock, before it
    /// returns `.push`).
    func taking() { condition.withLock { pushing = true } }

    private func sleep(untilMs deadline: Double?) {
        condition.lock()
        defer { condition.unlock() }
        if let deadline {
            let until = Date().addingTimeInterval(max(deadline - monotonicMs(), 0) / 1000)
            while running, !poked, condition.wait(until: until) {}
        } else {
            // (Not wait(until: .distantFuture): Foundation on Linux traps converting it.)
            while running, !poked { condition.wait() }
        }
        poked = false
    }
}
