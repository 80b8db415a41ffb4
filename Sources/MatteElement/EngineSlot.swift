import Foundation
import MatteEngine

/// A stream's engine: made at start in sync mode (files want every frame matted), or on the
/// inference thread's first frame in async mode, so that frames leave at once while models load.
/// Made once: a failure is kept and thrown again, and a later caps change reuses the engine made.
/// The models load with no lock held: a second caller (the inference thread of a new size while
/// the old one still loads) waits on the slot's condition for that load instead of starting its own.
final class EngineSlot {
    private enum State {
        case notMade
        /// A caller is making it now; others wait for the outcome.
        case making
        case made(MattingEngine)
        case failed(Error)
    }

    /// What `get` does once it has looked, under the lock.
    private enum Step {
        case use(MattingEngine)
        case fail(Error)
        case make
    }

    private let state: Locked<State>
    private let make: () throws -> MattingEngine
    /// Held by the inference thread that runs the engine, from its warm-up to its end: a thread that
    /// `AsyncMatting.stop` abandoned during a load may still be warming up when the next size's thread
    /// gets the same engine, which is not to be used by two threads at once. (Locked and unlocked on
    /// the same thread, as a mutex must be.)
    private let use = NSLock()

    /// Waits until no other thread runs the engine, then runs it alone until `endUse`.
    func beginUse() { use.lock() }
    func endUse() { use.unlock() }

    /// An engine already made.
    init(_ engine: MattingEngine) {
        state = Locked(.made(engine))
        make = { engine }
    }

    /// An engine that `make` will make on first use.
    init(making make: @escaping () throws -> MattingEngine) {
        state = Locked(.notMade)
        self.make = make
    }

    /// The engine once made, nil before (or after a failure).
    var loaded: MattingEngine? {
        state.withLock { state in
            if case let .made(engine) = state { return engine }
            return nil
        }
    }

    /// The engine, made now on the caller's thread if it was not yet (concurrent callers wait).
    func get() throws -> MattingEngine {
        let step = state.wait { state -> Step? in
            switch state {
            case let .made(engine): return .use(engine)
            case let .failed(error): return .fail(error)
            case .making: return nil
            case .notMade:
                state = .making
                return .make
            }
        }!  // (no deadline: wait returns only with a step)
        switch step {
        case let .use(engine): return engine
        case let .fail(error): throw error
        case .make:
            do {
                let made = try make()
                state.update { $0 = .made(made) }
                return made
            } catch {
                state.update { $0 = .failed(error) }
                throw error
            }
        }
    }
}
