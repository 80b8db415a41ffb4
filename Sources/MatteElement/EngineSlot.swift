import Foundation
import MatteEngine

/// A stream's engine: made at start in sync mode (files want every frame matted), or on the
/// inference thread's first frame in async mode, so that frames leave at once while models load.
/// Made once: a failure is kept and thrown again, and a later caps change reuses the engine made.
final class EngineSlot {
    /// Guards `engine` and `failure` for quick reads (the streaming thread's stats read the engine
    /// while it is being made); `making` serialises the makers, held for the whole load.
    private let lock = NSLock()
    private let making = NSLock()
    private var engine: MattingEngine?
    private var failure: Error?
    private let make: () throws -> MattingEngine

    /// An engine already made.
    init(_ engine: MattingEngine) {
        self.engine = engine
        make = { engine }
    }

    /// An engine that `make` will make on first use.
    init(making make: @escaping () throws -> MattingEngine) { self.make = make }

    /// The engine once made, nil before (or after a failure).
    var loaded: MattingEngine? { lock.withLock { engine } }

    /// The engine, made now if it was not yet (on the caller's thread; concurrent callers wait).
    func get() throws -> MattingEngine {
        making.lock()
        defer { making.unlock() }
        let (made, failed) = lock.withLock { (engine, failure) }
        if let made { return made }
        if let failed { throw failed }
        do {
            let made = try make()
            lock.withLock { engine = made }
            return made
        } catch {
            lock.withLock { failure = error }
            throw error
        }
    }
}
