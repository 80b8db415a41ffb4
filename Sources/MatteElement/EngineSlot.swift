import Foundation
import MatteEngine

/// A stream's engine: made at start in sync mode (files want every frame matted), or on the
/// inference thread's first frame in async mode, so that frames leave at once while models load.
/// Made once: a failure is kept and thrown again, and a later caps change reuses the engine made.
final class EngineSlot {
    private let lock = NSLock()
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
        lock.lock()
        defer { lock.unlock() }
        if let engine { return engine }
        if let failure { throw failure }
        do {
            let made = try make()
            engine = made
            return made
        } catch {
            failure = error
            throw error
        }
    }
}
