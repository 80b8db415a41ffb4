import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import MatteEngine
import TestPaths
import MattePixels

/// A real engine behind a test's wrapper: every call forwarded to it; a test's engine overrides
/// what it changes.
class ForwardingEngine: MattingEngine {
    let inner: MattingEngine

    init(_ inner: MattingEngine) { self.inner = inner }

    var kind: EngineKind { inner.kind }
    var precision: ModelPrecision { inner.precision }
    var modelNames: [String] { inner.modelNames }
    var provider: ExecutionProvider { inner.provider }
    var providerNote: String? { inner.providerNote }
    var dataOnDevice: Bool { inner.dataOnDevice }
    var license: String { inner.license }

    func reset() { inner.reset() }
    func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        try inner.matte(frame, into: alpha, report: &report)
    }
    func reseed(_ source: SeedSource?) { inner.reseed(source) }
    func replaceSeed(_ source: SeedSource) { inner.replaceSeed(source) }
    func warmUp(width: Int, height: Int) throws -> Double { try inner.warmUp(width: width, height: height) }
}

/// A real engine made slow on purpose: the first frame of a track takes `seedMs` (as a MatAnyone2
/// seed with its warm-up passes does on a slow CPU), every other frame `frameMs`. Counts the seeds,
/// that is the tracks the element started.
final class SlowEngine: ForwardingEngine {
    let seedMs: Double, frameMs: Double
    private let lock = NSLock()
    private var tracking = false
    private var seedCount = 0

    init(_ inner: MattingEngine, seedMs: Double, frameMs: Double) {
        self.seedMs = seedMs
        self.frameMs = frameMs
        super.init(inner)
    }

    var seeds: Int { lock.withLock { seedCount } }

    override func reset() {
        lock.withLock { tracking = false }
        inner.reset()
    }

    override func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        let seeding = lock.withLock { () -> Bool in
            defer { tracking = true }
            if !tracking { seedCount += 1 }
            return !tracking
        }
        Thread.sleep(forTimeInterval: (seeding ? seedMs : frameMs) / 1000)
        try inner.matte(frame, into: alpha, report: &report)
        if seeding { report.seedMs = seedMs }  // as MatAnyone2 reports its seed: no sample of a frame's cost
    }

    override func reseed(_ source: SeedSource?) {
        lock.withLock { tracking = false }
        inner.reseed(source)
    }

    override func warmUp(width: Int, height: Int) throws -> Double {
        Thread.sleep(forTimeInterval: frameMs / 1000)
        return try inner.warmUp(width: width, height: height) + frameMs
    }
}

/// The gap rule against the element's own slowness (issue: a live source into a slow MatAnyone2
/// re-seeded after every seed, each seed a new multi-second stall): frames the element or the base
/// class dropped for QoS, and stream time that passed while the element worked, are no gap; only
/// upstream's silence is. Any machine: the slowness is the engine's sleep, not the CPU's.
@Suite(.serialized) struct SlowEngineTests {
    /// Runs `body` with every element named `name` wrapped in a SlowEngine, handing over the engines
    /// made. Each test its own name: suites run side by side.
    func withSlowEngines(_ name: String, seedMs: Double, frameMs: Double, _ body: () -> Void) -> [SlowEngine] {
        precondition(gstreamerReady)
        let lock = NSLock()
        var made: [SlowEngine] = []
        EngineWrappers.set({ engine in
            let slow = SlowEngine(engine, seedMs: seedMs, frameMs: frameMs)
            lock.withLock { made.append(slow) }
            return slow
        }, forElementNamed: name)
        defer { EngineWrappers.set(nil, forElementNamed: name) }
        body()
        return lock.withLock { made }
    }

    /// A live 30 fps source → the element named `name` (its engine slow) → a syncing sink that
    /// sends QoS, for `buffers` frames.
    func runSlowLive(_ name: String, seedMs: Double, buffers: Int, extra: String = "") -> (run: LiveRun, engines: [SlowEngine]) {
        var run = LiveRun()
        let engines = withSlowEngines(name, seedMs: seedMs, frameMs: 250) {
            run = runLive("videotestsrc is-live=true pattern=ball num-buffers=\(buffers) "
                          + "! video/x-raw,format=BGRA,width=320,height=180,framerate=30/1 "
                          + "! \(TestPaths.element) name=\(name) \(extra) stats-interval=1 ! fakesink name=sink sync=true qos=true",
                          element: name)
        }
        return (run, engines)
    }

    /// The issue's chain, scaled down: a live 30 fps source, an element whose seed takes 3 s and
    /// each frame 250 ms, a syncing sink that sends QoS. One seed (the old rule seeded again after
    /// each seed: the base class's QoS drops the seed's backlog, and that read as a gap); the frames
    /// that leave keep up with the clock once the backlog is dropped.
    @Test func aLiveSourceIntoASlowElementSeedsOnce() {
        let (run, engines) = runSlowLive("slow-live", seedMs: 3000, buffers: 360)
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.reachedEOS)
        #expect(engines.count == 1)
        #expect(engines.first?.seeds == 1, "seeds: \(engines.first?.seeds ?? -1)")
        #expect(run.processed >= 10, "frames processed: \(run.processed)")
        #expect(run.elementDrops > 0)
        // Latency stays bounded: after the seed's backlog, what leaves is at most a few frames'
        // cost behind the clock (a re-seed would put it seconds behind again).
        let settled = run.lagsMs.suffix(run.lagsMs.count / 2)
        #expect(!settled.isEmpty && settled.allSatisfy { $0 < 1500 }, "lag behind the clock (ms): \(settled)")
    }

    /// A live chain whose sink sends no QoS (as udpsink) cannot drop what the slow element makes late:
    /// a WARNING says it falls behind, with the fixes, once; with a sink that sends QoS the element
    /// drops late frames itself and says nothing of the kind.
    @Test func fallingBehindWithoutQoSIsReported() {
        func run(_ name: String, qos: Bool) -> PipelineRun {
            var result = PipelineRun()
            _ = withSlowEngines(name, seedMs: 100, frameMs: 100) {
                result = runPipeline("videotestsrc is-live=true pattern=ball num-buffers=60 "
                                     + "! video/x-raw,format=BGRA,width=160,height=96,framerate=30/1 "
                                     + "! \(TestPaths.element) name=\(name) ! fakesink sync=true qos=\(qos)")
            }
            return result
        }
        let behind = run("behind-noqos", qos: false)
        #expect(behind.error == nil && behind.reachedEOS)
        let said = behind.warnings.filter { $0.contains("falls behind") }
        #expect(said.count == 1, "\(behind.warnings)")
        #expect(said.first.map { $0.contains("mode=async") && $0.contains("QoS") } == true)
        let dropping = run("behind-qos", qos: true)
        #expect(dropping.error == nil && !dropping.warnings.contains { $0.contains("falls behind") }, "\(dropping.warnings)")
    }

    /// The same slowness in async mode: inference blocks nothing, and still one seed.
    @Test func asyncModeWithASlowEngineSeedsOnce() {
        let (run, engines) = runSlowLive("slow-async", seedMs: 2500, buffers: 240, extra: "mode=async")
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.processed == 240)
        #expect(engines.first?.seeds == 1, "seeds: \(engines.first?.seeds ?? -1)")
    }

    /// A live application source (a client pushing 30 fps into appsrc, timestamped on arrival) that
    /// goes silent for 4 s mid-stream: that is upstream's silence, and the track starts over once;
    /// the element's own slowness before and after it is not.
    @Test func upstreamSilenceStillStartsOver() {
        precondition(gstreamerReady)
        var run = LiveRun()
        let engines = withSlowEngines("slow-silence", seedMs: 1000, frameMs: 150) {
            run = withPlayingPipeline("appsrc name=src is-live=true do-timestamp=true format=time "
                                      + "caps=video/x-raw,format=BGRA,width=160,height=96,framerate=30/1 "
                                      + "! \(TestPaths.element) name=slow-silence stats-interval=1 ! fakesink name=sink sync=true qos=true") { pipeline, bus in
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                let source = gst_bin_get_by_name(bin, "src")!
                defer { gst_object_unref(source) }
                let address = Int(bitPattern: UnsafeMutableRawPointer(source))
                let done = DispatchSemaphore(value: 0)
                let pusher = Thread {
                    defer { done.signal() }
                    let appsrc = UnsafeMutableRawPointer(bitPattern: address)!.assumingMemoryBound(to: GstAppSrc.self)
                    func push(seconds: Double) {
                        for _ in 0..<Int(seconds * 30) {
                            let buffer = gst_buffer_new_allocate(nil, gsize(160 * 96 * 4), nil)!
                            gst_buffer_memset(buffer, 0, 90, gsize(160 * 96 * 4))
                            _ = gst_app_src_push_buffer(appsrc, buffer)
                            Thread.sleep(forTimeInterval: 1.0 / 30)
                        }
                    }
                    push(seconds: 3)
                    Thread.sleep(forTimeInterval: 4)  // upstream's silence
                    push(seconds: 3)
                    _ = gst_app_src_end_of_stream(appsrc)
                }
                pusher.start()
                let run = collectLive(pipeline, bus, element: "slow-silence", timeout: 60)
                _ = done.wait(timeout: .now() + 15)  // the pusher holds the source until it is done
                return run
            } ?? LiveRun(error: "parse")
        }
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.reachedEOS)
        #expect(engines.first?.seeds == 2, "seeds: \(engines.first?.seeds ?? -1)")
    }

    /// Another thread's LATENCY query and property read are answered while a sync frame is in
    /// progress: neither waits behind the model call (here a 4 s seed).
    @Test func aQueryAndAPropertyReadDoNotWaitForASyncFrame() throws {
        precondition(gstreamerReady)
        struct Seen { var querySeconds = 0.0, propertySeconds = 0.0, answered = false, frameOutBefore = true, frameOut = false }
        var seen = Seen()
        _ = withSlowEngines("slow-query", seedMs: 4000, frameMs: 100) {
            _ = withPlayingPipeline("appsrc name=src format=time is-live=true do-timestamp=true caps=video/x-raw,format=BGRA,width=160,height=96,framerate=30/1 "
                                    + "! \(TestPaths.element) name=slow-query ! appsink name=out sync=false") { pipeline, _ in
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                let source = gst_bin_get_by_name(bin, "src")!, out = gst_bin_get_by_name(bin, "out")!
                let element = gst_bin_get_by_name(bin, "slow-query")!
                defer { for object in [source, out, element] { gst_object_unref(object) } }
                let sink = UnsafeMutableRawPointer(out).assumingMemoryBound(to: GstAppSink.self)
                let buffer = gst_buffer_new_allocate(nil, gsize(160 * 96 * 4), nil)!
                gst_buffer_memset(buffer, 0, 90, gsize(160 * 96 * 4))
                _ = gst_app_src_push_buffer(UnsafeMutableRawPointer(source).assumingMemoryBound(to: GstAppSrc.self), buffer)
                Thread.sleep(forTimeInterval: 1.5)  // (the frame's seed runs from about 0.2 s to 4.2 s)
                var start = Date()
                let query = gst_query_new_latency()!
                seen.answered = gst_element_query(element, query) != 0
                gst_query_unref(query)
                seen.querySeconds = Date().timeIntervalSince(start)
                start = Date()
                var value = GValue()
                g_value_init(&value, GType(7 << 2))  // G_TYPE_UINT
                g_object_get_property(UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self), "working-size", &value)
                g_value_unset(&value)
                seen.propertySeconds = Date().timeIntervalSince(start)
                // The frame is still in the engine: the answers did not wait for it.
                if let sample = gst_app_sink_try_pull_sample(sink, 0) { gst_sample_unref(sample) } else { seen.frameOutBefore = false }
                if let sample = gst_app_sink_try_pull_sample(sink, 30 * 1_000_000_000) {
                    seen.frameOut = true
                    gst_sample_unref(sample)
                }
            }
        }
        #expect(seen.answered)
        #expect(!seen.frameOutBefore, "the frame left before the query: the test did not query during a frame")
        #expect(seen.frameOut, "the frame never left")
        #expect(seen.querySeconds < 1.0, "the LATENCY query waited \(seen.querySeconds) s")
        #expect(seen.propertySeconds < 1.0, "the property read waited \(seen.propertySeconds) s")
    }
}
