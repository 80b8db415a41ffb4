import Foundation

/// A value behind a lock (the gst-plugins-rs `Mutex<…>` pattern). Our own lock, not GStreamer's: the
/// streaming, query and application threads all reach the element, and ThreadSanitizer sees this one.
final class Locked<Value> {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    /// The value, leaving nil behind (a request taken by the thread that acts on it).
    func take<Wrapped>() -> Value where Value == Wrapped? {
        withLock { value in
            defer { value = nil }
            return value
        }
    }
}
