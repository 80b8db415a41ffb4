import Foundation
import MatteEngine

/// A seam for in-process tests: wraps the engine that the element of a given name starts (an
/// engine made slow on purpose, say), so that the element's timing rules can be driven through
/// real pipelines on any machine. Keyed by element name, so that tests running side by side do not
/// meet; the plugin itself never registers one.
public enum EngineWrappers {
    public typealias Wrap = (MattingEngine) -> MattingEngine
    private static let table = Locked<[String: Wrap]>([:])

    /// Wraps the engine of every element named `name` started from now on (nil: no longer).
    public static func set(_ wrap: Wrap?, forElementNamed name: String) {
        table.withLock { $0[name] = wrap }
    }

    static func wrap(_ engine: MattingEngine, elementNamed name: String) -> MattingEngine {
        guard let wrap = table.withLock({ $0[name] }) else { return engine }
        return wrap(engine)
    }
}
