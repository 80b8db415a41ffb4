import Foundation
import MatteEngine

/// A value behind a lock (the gst-plugins-rs `Mutex<…>` pattern), with a condition to wait on for a
/// change of it. Our own lock, not GStreamer's: the streaming, release, inference, query and
/// application threads all reach the element, and ThreadSanitizer sees this one.
final class Locked<Value> {
    private let condition = Condition()
    private var value: Value
    /// Counts the time threads are held up by this lock (nil: not counted).
    private let waits: WaitClock?

    init(_ value: Value, waits: WaitClock? = nil) {
        self.value = value
        self.waits = waits
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        if let waits { waits.lock(condition) } else { condition.lock() }
        defer { condition.unlock() }
        return try body(&value)
    }

    /// `withLock`, then every thread waiting in `wait` looks again (the value changed).
    func update<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        if let waits { waits.lock(condition) } else { condition.lock() }
        defer {
            condition.broadcast()
            condition.unlock()
        }
        return try body(&value)
    }

    /// Waits, the lock released meanwhile, until `body` returns a result (non-nil) under the lock or
    /// `deadlineMs` (monotonic) passes; nil then. `body` is asked again after every `update` (and
    /// at the deadline); the waiting time counts against the calling thread when `counted`.
    func wait<Result>(deadlineMs: Double? = nil, counted: Bool = false, _ body: (inout Value) -> Result?) -> Result? {
        condition.lock()
        defer { condition.unlock() }
        let start = DispatchTime.now().uptimeNanoseconds
        defer { if counted { waits?.record(Int(DispatchTime.now().uptimeNanoseconds - start)) } }
        while true {
            if let result = body(&value) { return result }
            if let deadlineMs {
                guard deadlineMs > monotonicMs() else { return nil }
                condition.wait(untilMs: deadlineMs)
            } else {
                condition.wait()
            }
        }
    }

    /// The value, leaving nil behind (a request taken by the thread that acts on it).
    func take<Wrapped>() -> Value where Value == Wrapped? {
        withLock { value in
            defer { value = nil }
            return value
        }
    }
}

/// A mutex and its condition variable (pthreads: unlike NSCondition, it can be tried, so that
/// `WaitClock` counts only the waits that happened).
final class Condition {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }
    func unlock() { pthread_mutex_unlock(mutex) }
    func broadcast() { pthread_cond_broadcast(cond) }
    func wait() { pthread_cond_wait(cond, mutex) }

    /// Waits until woken or until the monotonic time `deadlineMs` (see `monotonicMs`).
    func wait(untilMs deadlineMs: Double) {
        let ns = max(deadlineMs, 0) * 1_000_000
        var deadline = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns.truncatingRemainder(dividingBy: 1_000_000_000)))
        _ = pthread_cond_timedwait(cond, mutex, &deadline)
    }
}
