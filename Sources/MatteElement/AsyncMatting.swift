import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// The constant-rate mode's inference side: a thread of its own makes the engine (models load here,
/// not on the streaming thread, so that frames leave at once meanwhile) and warms it up at the
/// stream's size, then runs it on the newest frame it was handed (an older one still waiting is
/// replaced), and keeps the last few finished alphas for the streaming thread to pick from. The
/// engine is touched by this thread alone while it runs; resets and reseeds asked for elsewhere are
/// applied by it before its next frame. A failure to make or warm up the engine is kept like an
/// inference failure: the streaming thread reports it once and stops.
final class AsyncMatting {
    /// A finished alpha: the full-size plane of the frame at `pts`.
    struct Alpha {
        let pts: UInt64
        let plane: [UInt8]
        let finishedMs: Double
        let inferenceMs: Double
        /// The engine's report of that frame (stages, models, memory, people, the watch).
        let report: FrameReport
    }

    /// A frame handed over: the input buffer itself (a reference, mapped read-only when its turn
    /// comes), not a copy of its pixels.
    private struct Frame {
        let buffer: OwnedBuffer
        let info: GstVideoInfo
        let pts: UInt64
    }

    private enum Request {
        case reset
        case reseed(SeedSource?)
        case replaceSeed(SeedSource)
    }

    /// Where the engine comes from; the inference thread's alone once it runs, and let go before
    /// `stop` returns (see `work`).
    private var engines: EngineSlot?
    /// The stream's size, for the warm-up.
    private let width: Int, height: Int
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var pending: Frame?
    private var inFlight: UInt64?
    private var requests: [Request] = []
    private var finished: [Alpha] = []
    private var failure: Error?
    private var running = false
    private var thread: Thread?
    /// The thread is making or warming up the engine (`prepare`): `stop` does not wait for that.
    private var preparing = false
    /// `stop` returned while the thread was preparing: it finishes on its own and lets go of
    /// everything itself (`work`).
    private var abandoned = false
    /// Alphas kept for the streaming thread (each a full frame of bytes), and the window of the
    /// inference figures (`medianInferenceMs`, `inferenceFPS`).
    static let kept = 6
    /// Alphas kept at most: `kept` and one for each frame the element may hold (async-delay). A held
    /// frame that was inferred reaches the head of the queue up to the delay later, many inferences
    /// on: with only `kept`, its own alpha was gone by then (seen with async-delay=1500 and 100 ms
    /// inferences: no frame left with its own). `forgetAlphas(before:)` drops what no frame needs.
    private let keptAtMost: Int

    /// Called on the inference thread with a frame's track events (posting a bus message is thread-safe).
    var onTrackEvents: (([TrackEvent], UInt64) -> Void)?
    /// What the engine said of its surroundings on a frame (the inference server lost, back), from this thread.
    var onNotices: (([EngineNotice]) -> Void)?
    /// Called on the inference thread after each inference (an alpha kept, or a failure).
    var onFinished: (() -> Void)?

    /// The element, for the warnings a load posts (no reference of the thread's own: the element's
    /// finalize waits for the loads `stop` abandoned, `AbandonedLoads`, so it outlives them).
    private let element: ElementHandle?

    init(engines: EngineSlot, width: Int, height: Int, heldFrames: Int = 0, element: ElementHandle? = nil) {
        keptAtMost = AsyncMatting.kept + max(heldFrames, 0)
        self.element = element
        self.engines = engines
        self.width = width
        self.height = height
    }

    deinit { stop() }

    func start() {
        ProcessExit.register()
        lockMailbox()
        defer { unlockMailbox() }
        guard !running else { return }
        running = true
        // (The thread holds `self` until it ends: `stop` may leave it to finish a load. An abandoned
        // one ends its `AbandonedLoads` entry only after letting go of `self` and all it holds, the
        // closures to the element among them: the element's finalize waits for that.)
        let held = Unmanaged.passRetained(self)
        let worker = Thread {
            let leftAlone = held.takeUnretainedValue().work()
            held.release()
            if leftAlone { AbandonedLoads.end() }
        }
        worker.name = "matanyone-inference"
        thread = worker
        worker.start()
    }

    /// Stops the thread (after the frame in progress) and waits for it; forgets pending work. A
    /// thread still making or warming up the engine is not waited for (a model load takes seconds,
    /// a TensorRT engine build minutes, and a pipeline that is stopped or resized must not): it is
    /// abandoned, finishes the load on its own, drops the result and ends.
    func stop() {
        lockMailbox()
        guard running else {
            unlockMailbox()
            return
        }
        running = false
        let dropped = pending
        pending = nil
        condition.broadcast()
        while thread != nil, !preparing { condition.wait() }
        if thread != nil {
            abandoned = true
            AbandonedLoads.begin()  // (ended by the thread, `work`)
        }
        unlockMailbox()
        withExtendedLifetime(dropped) {}  // (its buffer goes back upstream outside the lock)
    }

    /// Hands the newest frame over (a reference to its buffer; `info` its caps); a frame still
    /// waiting is dropped for it (its reference released outside the lock: a pool may take it back).
    func submit(_ buffer: OwnedBuffer, info: GstVideoInfo, pts: UInt64) {
        lockMailbox()
        let dropped = pending
        pending = Frame(buffer: buffer, info: info, pts: pts)
        condition.broadcast()
        unlockMailbox()
        withExtendedLifetime(dropped) {}
    }

    func reset() { enqueue(.reset, clearing: true) }
    func reseed(_ source: SeedSource?) { enqueue(.reseed(source), clearing: false) }
    func replaceSeed(_ source: SeedSource) { enqueue(.replaceSeed(source), clearing: false) }

    /// A reset also forgets the alphas of the old track and any frame still waiting.
    private func enqueue(_ request: Request, clearing: Bool) {
        lockMailbox()
        requests.append(request)
        var dropped: Frame?
        if clearing {
            finished.removeAll()
            dropped = pending
            pending = nil
        }
        unlockMailbox()
        withExtendedLifetime(dropped) {}  // (released outside the lock)
    }

    /// The finished alpha closest in time to `pts` (nil before the first), whether the frame at `pts`
    /// is still waiting for or under inference, and the first failure of the thread, if any.
    func closest(to pts: UInt64) -> (alpha: Alpha?, ownAlphaComing: Bool, failure: Error?) {
        lockMailbox()
        defer { unlockMailbox() }
        let best = finished.min { distance($0.pts, pts) < distance($1.pts, pts) }
        let coming = pending?.pts == pts || inFlight == pts
        return (best, coming && best?.pts != pts, failure)
    }

    /// Waits (up to `timeoutMs`) until no frame is waiting or under inference: draining at EOS.
    func waitIdle(timeoutMs: Double) {
        let deadline = Date().addingTimeInterval(timeoutMs / 1000)
        lockMailbox()
        while running, pending != nil || inFlight != nil, condition.wait(until: deadline) {}
        unlockMailbox()
    }

    /// Waits (up to `timeoutMs`) for the alpha of the frame at `pts`, while it is waiting for or under
    /// inference.
    func waitForAlpha(of pts: UInt64, timeoutMs: Double) {
        let deadline = Date().addingTimeInterval(timeoutMs / 1000)
        lockMailbox()
        while running, pending?.pts == pts || inFlight == pts, !finished.contains(where: { $0.pts == pts }),
              condition.wait(until: deadline) {}
        unlockMailbox()
    }

    /// The frame under inference, if any (its alpha is the next to come).
    var inFlightPts: UInt64? {
        lockMailbox()
        defer { unlockMailbox() }
        return inFlight
    }

    /// The median inference time of the alphas kept (ms), nil before the first.
    var medianInferenceMs: Double? {
        lockMailbox()
        defer { unlockMailbox() }
        let times = finished.suffix(AsyncMatting.kept).map(\.inferenceMs).sorted()
        return times.isEmpty ? nil : times[times.count / 2]
    }

    /// Inferences finished per second over the alphas kept (0 with fewer than two).
    var inferenceFPS: Double {
        lockMailbox()
        defer { unlockMailbox() }
        let window = finished.suffix(AsyncMatting.kept)
        guard window.count >= 2, let first = window.first, let last = window.last, last.finishedMs > first.finishedMs else { return 0 }
        return Double(window.count - 1) * 1000 / (last.finishedMs - first.finishedMs)
    }

    /// Forgets the alphas from before `pts` (the oldest frame still to leave) but the newest of them:
    /// to that frame and every later one, it is closer than any older. The last `kept` stay (the
    /// inference figures' window).
    func forgetAlphas(before pts: UInt64) {
        lockMailbox()
        defer { unlockMailbox() }
        guard finished.count > AsyncMatting.kept,
              let newestBefore = finished.lastIndex(where: { $0.pts < pts }), newestBefore > 0 else { return }
        let unneeded = min(newestBefore, finished.count - AsyncMatting.kept)
        finished.removeFirst(unneeded)
    }

    private func distance(_ a: UInt64, _ b: UInt64) -> UInt64 { a > b ? a - b : b - a }

    /// The engine, made and warmed up at the stream's size; nil (the failure kept) when that failed.
    /// On success the engine is in use by this thread (`EngineSlot.beginUse`) until `serve` returns.
    private func prepare() -> MattingEngine? {
        guard let engines else { return nil }
        do {
            let engine = try engines.get()
            engines.beginUse()
            lockMailbox()
            let stopped = !running
            unlockMailbox()
            // (Abandoned while it loaded: no warm-up at the old size.)
            if stopped {
                engines.endUse()
                return nil
            }
            do {
                _ = try engine.warmUp(width: width, height: height)
            } catch {
                engines.endUse()
                throw error
            }
            return engine
        } catch {
            lockMailbox()
            failure = failure ?? error
            let dropped = pending
            pending = nil
            condition.broadcast()
            unlockMailbox()
            withExtendedLifetime(dropped) {}  // (released outside the lock)
            return nil
        }
    }

    /// The inference thread's nice value. On two cores the streaming thread competes with the
    /// runtime's own threads for every frame's motion and composite; a frame that leaves late is
    /// worse than an alpha that is a few ms later, so inference yields. (Linux keeps nice per thread,
    /// and the runtime's threads, made while the models load on this thread, inherit it.)
    static let inferenceNice: Int32 = 10

    /// The alpha of `frame` (its plane, or the error the engine threw).
    private func matte(_ frame: Frame, engine: MattingEngine, report: inout FrameReport) -> ([UInt8], Error?) {
        let width = Int(frame.info.width), height = Int(frame.info.height)
        var plane = [UInt8](repeating: 0, count: width * height)
        report.clear()
        let outcome = withMappedFrame(frame.buffer, info: frame.info) { input -> Error? in
            do {
                try plane.withUnsafeMutableBufferPointer { alpha in
                    try engine.matte(input.bgra, into: GrayImage(base: alpha.baseAddress!, width: width, height: height, stride: width),
                                     report: &report)
                }
                return nil
            } catch {
                return error
            }
        }
        guard let outcome else { return (plane, ElementError.streamFormat("an input frame could not be mapped for inference")) }
        return (plane, outcome)
    }

    /// Returns whether `stop` abandoned the thread (during a load).
    @inline(never)
    private func work() -> Bool {
        Thread.current.threadDictionary[AbandonedLoads.inferenceThreadKey] = true
        // (Raising one's own nice needs no privilege; where it fails, inference keeps the default.)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, AsyncMatting.inferenceNice)
        serve()
        lockMailbox()
        let leftAlone = abandoned
        unlockMailbox()
        if leftAlone, ProcessExit.begun {
            // Abandoned by `stop` and the process is exiting: freeing the models now would run
            // during the exit handlers, ONNX Runtime's among them (see below). The process ends anyway.
            _ = engines.map { Unmanaged.passRetained($0) }
        }
        // `stop` returns only now, when this thread holds no engine: it is freed by the element as
        // it stops, never by this thread afterwards (but for a load `stop` abandoned: then here). (This thread holds `self` until it returns, and
        // `self` held the slot: strace showed an engine freed here during gst-launch's exit handlers,
        // ONNX Runtime's among them, and cut short by the exit, its shared memory regions left in
        // /dev/shm; a heap corruption at exit seen once in CI fits it.)
        engines = nil
        // (An abandoned thread's end is waited for by the element's finalize (`start`), so a process
        // that unrefs its pipeline and exits never runs its exit handlers, ONNX Runtime's static
        // destructors among them, under a load still inside the runtime: GstValidate's
        // change_state_intensive crashed so, SIGSEGV in the runtime's schema registry.)
        lockMailbox()
        thread = nil
        condition.broadcast()
        unlockMailbox()
        return leftAlone
    }

    /// The thread's work, until `stop`; everything it holds is released when it returns (not
    /// inlined: its locals must not outlive it).
    @inline(never)
    private func serve() {
        lockMailbox()
        guard running else {
            unlockMailbox()
            return
        }
        preparing = true
        condition.broadcast()  // (a `stop` waiting for this thread need not wait for the load)
        unlockMailbox()
        let engine = prepare()
        AbandonedLoads.loadEnded()
        defer { if engine != nil { engines?.endUse() } }
        lockMailbox()
        preparing = false
        let stopped = !running
        unlockMailbox()
        if stopped { return }  // (abandoned while loading: the engine is dropped unused)
        var report = FrameReport(modelCount: engine?.modelNames.count ?? 0)
        while true {
            lockMailbox()
            while running, pending == nil, requests.isEmpty { condition.wait() }
            guard running else {
                unlockMailbox()
                return
            }
            let todo = requests
            requests.removeAll()
            // (After a failure frames are not worked on: the streaming thread stops on it.)
            let taken = pending
            let frame = engine == nil ? nil : taken
            pending = nil
            inFlight = frame?.pts
            if engine == nil { condition.broadcast() }  // (a drain waiting for the frame dropped)
            unlockMailbox()
            guard let engine else {
                withExtendedLifetime(taken) {}  // (dropped outside the lock)
                continue
            }

            for request in todo {
                switch request {
                case .reset: engine.reset()
                case let .reseed(source): engine.reseed(source)
                case let .replaceSeed(source): engine.replaceSeed(source)
                }
            }
            guard let frame else { continue }
            let start = monotonicMs()
            let (plane, error) = matte(frame, engine: engine, report: &report)
            let end = monotonicMs()
            let pts = frame.pts
            if error == nil, !report.events.isEmpty { onTrackEvents?(report.events, frame.pts) }
            if !report.notices.isEmpty { onNotices?(report.notices) }
            lockMailbox()
            inFlight = nil
            if let error {
                failure = failure ?? error
            } else if requests.allSatisfy({ if case .reset = $0 { return false }; return true }) {
                // (An alpha finished after a reset was asked for belongs to the old track.)
                finished.append(Alpha(pts: pts, plane: plane, finishedMs: end, inferenceMs: end - start, report: report))
                if finished.count > keptAtMost { finished.removeFirst(finished.count - keptAtMost) }
            }
            condition.broadcast()
            unlockMailbox()
            // (The frame's buffer goes back upstream here, outside the lock: ARC could otherwise
            // release it after its last use, under the lock.)
            withExtendedLifetime(frame) {}
            onFinished?()
        }
    }

    // The mailbox lock, with a thread-local mark of holding it: no buffer may be released while it is
    // held (a pool may take the buffer back, and its release may wake threads that want this lock).
    private func lockMailbox() {
        condition.lock()
        MailboxMark.set(true)
    }

    private func unlockMailbox() {
        MailboxMark.set(false)
        condition.unlock()
    }
}

/// Whether the calling thread holds an inference mailbox's lock (thread-local): what the tests check
/// when a buffer is released.
enum MailboxMark {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    static var heldByCurrentThread: Bool { pthread_getspecific(key) != nil }

    static func set(_ held: Bool) { pthread_setspecific(key, held ? UnsafeRawPointer(bitPattern: 1) : nil) }
}

/// The model loads `stop` abandoned that are still running, process-wide: the element's finalize
/// waits for them (`waitForAll`), so that none is still inside ONNX Runtime (or OpenVINO) when the
/// application, having unreffed its pipeline, exits and the runtimes' static destructors run.
enum AbandonedLoads {
    private static let condition = NSCondition()
    private static var running = 0
    /// Marks an inference thread (its thread dictionary).
    static let inferenceThreadKey = "matanyone.inference-thread"

    static func begin() {
        condition.lock()
        running += 1
        condition.unlock()
    }

    static func end() {
        condition.lock()
        running -= 1
        condition.broadcast()
        condition.unlock()
    }

    static var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return running
    }

    private static var exitWaits = 0

    /// Once a load has ended (made or failed): registers an exit handler that waits for the abandoned
    /// loads. Exit handlers run newest first, and ONNX Runtime registers its static destructors
    /// lazily, during a load (its schema registry, its provider list): only a handler registered after
    /// that runs before them. (A few per process suffice: each later load finds the runtime's made.)
    static func loadEnded() {
        condition.lock()
        let register = exitWaits < 16
        if register { exitWaits += 1 }
        condition.unlock()
        if register { atexit { AbandonedLoads.waitForAll(limit: 60) } }
    }

    /// gst_deinit finalizes the plugin (with the registry): the loads are waited for then too, for an
    /// application whose pipeline outlives it (gst-validate's monitors keep its elements) and which
    /// exits before any load ended (no exit handler of `loadEnded` yet).
    static func waitAtDeinit(of plugin: OpaquePointer) {
        g_object_weak_ref(UnsafeMutableRawPointer(plugin).assumingMemoryBound(to: GObject.self),
                          { _, _ in AbandonedLoads.waitForAll(limit: 60) }, nil)
    }

    /// Waits until none runs, or `limit` has passed (a TensorRT engine build may take minutes: past
    /// that the element goes anyway, as it did before). Returns whether none runs.
    @discardableResult
    static func waitForAll(limit: TimeInterval = 600) -> Bool {
        // (Never on an inference thread: a last unref there must not wait for that thread itself.)
        if Thread.current.threadDictionary[inferenceThreadKey] != nil { return count == 0 }
        let deadline = Date(timeIntervalSinceNow: limit)
        condition.lock()
        defer { condition.unlock() }
        while running > 0 { if !condition.wait(until: deadline) { break } }
        return running == 0
    }
}

/// Whether the process has begun to exit (its exit handlers run): registered with the first inference
/// thread.
enum ProcessExit {
    private static let flag = Locked(false)
    private static let registered: Void = { atexit { ProcessExit.flag.withLock { $0 = true } } }()

    static func register() { _ = registered }

    static var begun: Bool { flag.withLock { $0 } }
}
