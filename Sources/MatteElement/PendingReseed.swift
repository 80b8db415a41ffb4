import Foundation
import MatteEngine

/// A reseed asked for and not yet applied to a frame.
enum PendingReseed {
    /// From this source (nil: as configured).
    case ready(SeedSource?)
    /// A serialized event's mask, still decoding: the frame after the event waits for it. The load
    /// replaces this with `.ready` when it is done (unless a newer request replaced it first).
    case loading(MaskLoad)

    /// The load the next frame must wait for: one still decoding that no frame has waited for yet
    /// (a frame waits once; after a timeout the reseed comes when the load completes).
    var loadToAwait: MaskLoad? {
        if case let .loading(load) = self, load.claimWait() { return load }
        return nil
    }
}

/// The decoding of a serialized reseed's mask, which the frame after the event waits for.
final class MaskLoad: @unchecked Sendable {
    let path: String
    private let condition = NSCondition()
    private var done = false
    private var waitClaimed = false

    init(path: String) { self.path = path }

    /// The load is over (its result already stands in the pending reseed).
    func finish() {
        condition.lock()
        done = true
        condition.broadcast()
        condition.unlock()
    }

    /// True the first time only: one frame waits for a load, not every frame while it is slow.
    func claimWait() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if waitClaimed { return false }
        waitClaimed = true
        return true
    }

    /// Whether the load finished within `ms`.
    func wait(ms: Int) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(ms) / 1000)
        condition.lock()
        defer { condition.unlock() }
        while !done {
            if !condition.wait(until: deadline) { break }
        }
        return done
    }
}
