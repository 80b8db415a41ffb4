import CGStreamer
import Foundation
import MatteEngine

/// mode=async with `async-delay`: the thread that lets held frames go on their own deadline, not
/// when the next input happens to arrive. It sleeps until the oldest frame's deadline, or until
/// something may let it go sooner (its own alpha finished, a new frame), renders it and pushes it
/// downstream. It has no lock of its own: its flags live in the async path, under the path lock,
/// and it sleeps on that lock's condition (`AsyncPath.poked`). The streaming thread meets it where
/// order or room matters: a full queue (it waits for room: upstream is held back, as by a `queue`
/// with leaky=no), a serialized event (one the base class only forwards waits behind the held frames
/// and is pushed after them; a segment or a new stream waits on the streaming thread until they have
/// left), renegotiation (never while a frame is produced or pushed: `AsyncPath.renegotiating` and
/// `pushing`), and EOS or new caps (everything leaves now).
final class FrameReleaser {
    /// What the release thread is to do next, decided under the path lock.
    enum Step {
        /// Render this frame (outside the lock) and push it, then the events that came after it.
        case leave(AsyncPath.Departing)
        /// Sleep until this monotonic time (ms), or until poked.
        case waitUntil(Double)
        /// Nothing may leave: sleep until poked.
        case idle
        /// This releaser is no longer the stream's (new caps, stop): end the thread.
        case retire
    }

    /// Decides the next step under the path lock (the element's departure rule).
    private let next: (FrameReleaser) -> Step
    /// Renders a frame that leaves and pushes it and its events (outside the lock); returns the flow.
    private let release: (AsyncPath.Departing) -> GstFlowReturn
    /// Records a push's outcome under the path lock and wakes the threads waiting for it.
    private let pushed: (FrameReleaser, GstFlowReturn) -> Void
    /// Sleeps until poked or `deadlineMs`; false when this releaser was retired or stopped.
    private let sleep: (FrameReleaser, Double?) -> Bool
    /// Signalled when the thread has ended.
    private let ended = DispatchSemaphore(value: 0)
    private var thread: Thread?

    init(next: @escaping (FrameReleaser) -> Step, release: @escaping (AsyncPath.Departing) -> GstFlowReturn,
         pushed: @escaping (FrameReleaser, GstFlowReturn) -> Void, sleep: @escaping (FrameReleaser, Double?) -> Bool) {
        self.next = next
        self.release = release
        self.pushed = pushed
        self.sleep = sleep
    }

    /// Starts the thread (once, by the thread that made the releaser).
    func start() {
        let worker = Thread { [self] in
            work()
            ended.signal()
        }
        worker.name = WaitClock.releaseThreadName
        thread = worker
        worker.start()
    }

    /// Waits for the thread to end: call once it was retired (taken off the path, poked), never under
    /// the path lock, which it takes.
    func join() {
        guard thread != nil else { return }
        ended.wait()
        thread = nil
    }

    private func work() {
        while true {
            switch next(self) {
            case .retire:
                return
            case let .leave(departing):
                pushed(self, release(departing))
            case let .waitUntil(deadlineMs):
                guard sleep(self, deadlineMs) else { return }
            case .idle:
                guard sleep(self, nil) else { return }
            }
        }
    }
}
