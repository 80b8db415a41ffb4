import Foundation
import MatteEngine
import Synchronization

/// How long the element's threads were held up by each other (ms, cumulative since the element was made): the
/// streaming thread (and any query or application thread) and the release thread of async-delay,
/// each while blocked on a lock or waiting for a step only the other thread can take (a push to
/// finish, a renegotiation to end). Reported in the stats (`streaming-wait-ms`, `release-wait-ms`)
/// with the streaming thread's own time in the element (`streaming-ms`), so that a change to the
/// frame path is measured, not guessed. Atomics: counting must not add a lock of its own.
final class WaitClock: Sendable {
    private let streamingNs = Atomic<Int>(0)
    private let releaseNs = Atomic<Int>(0)
    private let submitNs = Atomic<Int>(0)

    /// The release thread's name (see FrameReleaser), which tells its waits from the others'.
    static let releaseThreadName = "matanyone-release"

    /// Runs `body` (a wait for the other thread) and counts its time against the calling thread.
    func timing<Result>(_ body: () throws -> Result) rethrows -> Result {
        let start = DispatchTime.now().uptimeNanoseconds
        defer { record(Int(DispatchTime.now().uptimeNanoseconds - start)) }
        return try body()
    }

    /// Takes `lock`, counting the time blocked when another thread held it.
    func lock(_ lock: Condition) {
        if lock.tryLock() { return }
        timing { lock.lock() }
    }

    func record(_ ns: Int) {
        if Thread.current.name == WaitClock.releaseThreadName {
            releaseNs.add(ns, ordering: .relaxed)
        } else {
            streamingNs.add(ns, ordering: .relaxed)
        }
    }

    /// The streaming thread's time in the element for one buffer (submit and generate_output, ns).
    func addSubmit(_ ns: Int) { submitNs.add(ns, ordering: .relaxed) }

    var streamingWaitMs: Double { Double(streamingNs.load(ordering: .relaxed)) / 1e6 }
    var releaseWaitMs: Double { Double(releaseNs.load(ordering: .relaxed)) / 1e6 }
    var submitMs: Double { Double(submitNs.load(ordering: .relaxed)) / 1e6 }
}
