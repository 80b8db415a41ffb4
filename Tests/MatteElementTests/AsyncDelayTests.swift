import CGStreamer
import CGstCheck
import Foundation
import Testing
@testable import MatteElement
import MatteEngine
import MattePixels
import TestPaths

/// `async-delay` keeps time: held frames leave on their own deadline (a thread of the element's, not
/// the next input), serialized events keep their place after the frames before them, the queue is
/// bounded (upstream waits at the bound), and the allocation answer and the latency say what is
/// held. The engine is the segmenter made slow on purpose (SlowEngine), so that frames wait for
/// their delay on any machine.
@Suite(.serialized) struct AsyncDelayTests {
    static let width = 160, height = 96
    let caps = "video/x-raw,format=BGRA,width=\(width),height=\(height),framerate=30/1"

    private func frame(_ index: Int) -> UnsafeMutablePointer<GstBuffer> {
        let bytes = AsyncDelayTests.width * AsyncDelayTests.height * 4
        let buffer = gst_buffer_new_allocate(nil, gsize(bytes), nil)!
        gst_buffer_memset(buffer, 0, UInt8(40 + index), gsize(bytes))
        buffer.pointee.pts = GstClockTime(index) * 33_333_333
        buffer.pointee.duration = 33_333_333
        return buffer
    }

    /// A harnessed element named `name` in async mode with `properties`, its engine wrapped by `wrap`
    /// (BGRA in at this suite's size, GRAY8 out).
    private func withHarness(_ name: String, _ properties: String, wrapping wrap: @escaping EngineWrappers.Wrap,
                             _ body: (UnsafeMutablePointer<GstHarness>) throws -> Void) rethrows {
        precondition(gstreamerReady)
        EngineWrappers.set(wrap, forElementNamed: name)
        defer { EngineWrappers.set(nil, forElementNamed: name) }
        let harness = gst_harness_new_parse("\(TestPaths.element) name=\(name) mode=async \(properties)")!
        defer { gst_harness_teardown(harness) }
        // (Async mode makes its engine after the first caps, set below: the wrap is in time.)
        EngineWrappers.inject(into: harness.pointee.element)
        gst_harness_set_src_caps_str(harness, caps)
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8")
        try body(harness)
    }

    /// A harnessed element named `name` whose engine is slow (each frame `frameMs`).
    private func withSlowHarness(_ name: String, _ properties: String, frameMs: Double = 400,
                                 _ body: (UnsafeMutablePointer<GstHarness>) throws -> Void) rethrows {
        try withHarness(name, properties, wrapping: { SlowEngine($0, seedMs: frameMs, frameMs: frameMs) }, body)
    }

    /// Buffers pulled until `count` came or `seconds` passed.
    private func pull(_ harness: UnsafeMutablePointer<GstHarness>, count: Int, within seconds: Double) -> Int {
        var pulled = 0
        let deadline = Date().addingTimeInterval(seconds)
        while pulled < count, Date() < deadline {
            if let buffer = gst_harness_try_pull(harness) {
                gst_buffer_unref(buffer)
                pulled += 1
            } else {
                Thread.sleep(forTimeInterval: 0.01)
            }
        }
        return pulled
    }

    /// Upstream pushes three frames and goes quiet (no EOS): all three leave once their delay is
    /// over. (Before, a held frame left only when the next input came: the last stayed inside.)
    @Test func anIdleUpstreamStrandsNoFrame() throws {
        withSlowHarness("delay-idle", "async-delay=150") { harness in
            for index in 0..<3 { #expect(gst_harness_push(harness, frame(index)) == GST_FLOW_OK) }
            #expect(pull(harness, count: 3, within: 5) == 3)
        }
    }

    /// A serialized event pushed after two frames reaches downstream after them, and before the
    /// frame pushed after it, without holding up upstream meanwhile.
    @Test func serializedEventsKeepTheirPlaceAfterHeldFrames() throws {
        withSlowHarness("delay-events", "async-delay=200") { harness in
            let order = Order()
            let probeType = GstPadProbeType(rawValue: GST_PAD_PROBE_TYPE_BUFFER.rawValue | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM.rawValue)
            gst_pad_add_probe(harness.pointee.sinkpad, probeType, recordOrder, Unmanaged.passUnretained(order).toOpaque(), nil)
            #expect(gst_harness_push(harness, frame(0)) == GST_FLOW_OK)
            #expect(gst_harness_push(harness, frame(1)) == GST_FLOW_OK)
            #expect(gst_harness_push_event(harness, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM,
                                                                         gst_structure_new_empty("test-marker"))) != 0)
            // The event waits with the frames; upstream does not (the latency tracer sends one per buffer).
            #expect(gst_harness_buffers_received(harness) == 0, "the event was held up until the frames left")
            #expect(gst_harness_push(harness, frame(2)) == GST_FLOW_OK)
            #expect(pull(harness, count: 3, within: 5) == 3)
            #expect(order.seen.withLock { $0 } == ["buffer", "buffer", "test-marker", "buffer"])
        }
    }

    /// A seek while frames are held: none of them reaches downstream after FLUSH_STOP (they are
    /// forgotten), and the frames after it all do.
    @Test func aFlushForgetsHeldFramesAndNothingFromBeforeItLeavesAfter() throws {
        withSlowHarness("delay-flush", "async-delay=300") { harness in
            let order = Order(withPts: true)
            let probeType = GstPadProbeType(rawValue: GST_PAD_PROBE_TYPE_BUFFER.rawValue | GST_PAD_PROBE_TYPE_EVENT_FLUSH.rawValue)
            gst_pad_add_probe(harness.pointee.sinkpad, probeType, recordOrder, Unmanaged.passUnretained(order).toOpaque(), nil)
            for index in 0..<4 { #expect(gst_harness_push(harness, frame(index)) == GST_FLOW_OK) }
            #expect(gst_harness_push_event(harness, gst_event_new_flush_start()) != 0)
            #expect(gst_harness_push_event(harness, gst_event_new_flush_stop(1)) != 0)
            var segment = GstSegment()
            gst_segment_init(&segment, GST_FORMAT_TIME)
            #expect(gst_harness_push_event(harness, gst_event_new_segment(&segment)) != 0)
            for index in 10..<13 { #expect(gst_harness_push(harness, frame(index)) == GST_FLOW_OK) }
            #expect(pull(harness, count: 3, within: 5) >= 3)
            let seen = order.seen.withLock { $0 }
            let afterFlush = seen.drop { $0 != "flush-stop" }.dropFirst()
            #expect(seen.contains("flush-stop"), "\(seen)")
            #expect(afterFlush.elementsEqual(["buffer 10", "buffer 11", "buffer 12"]), "\(seen)")
        }
    }

    /// Sticky events (tags, sticky custom events) held behind frames that a flush forgets still reach
    /// downstream, after the new segment and before the first frame after the flush, as a pad keeps
    /// its sticky events across a flush; a plain event behind those frames goes with them.
    @Test func stickyEventsHeldBehindForgottenFramesOutliveTheFlush() throws {
        withSlowHarness("delay-sticky", "async-delay=400") { harness in
            let order = Order(withPts: true)
            let probeType = GstPadProbeType(rawValue: GST_PAD_PROBE_TYPE_BUFFER.rawValue | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM.rawValue
                                            | GST_PAD_PROBE_TYPE_EVENT_FLUSH.rawValue)
            gst_pad_add_probe(harness.pointee.sinkpad, probeType, recordOrder, Unmanaged.passUnretained(order).toOpaque(), nil)
            for index in 0..<2 { #expect(gst_harness_push(harness, frame(index)) == GST_FLOW_OK) }
            let tags = gst_tag_list_new_from_string("taglist, title=(string)kept-across-the-flush")!
            #expect(gst_harness_push_event(harness, gst_event_new_tag(tags)) != 0)
            #expect(gst_harness_push_event(harness, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM_STICKY,
                                                                         gst_structure_new_empty("test-sticky"))) != 0)
            #expect(gst_harness_push_event(harness, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM,
                                                                         gst_structure_new_empty("test-plain"))) != 0)
            #expect(gst_harness_push_event(harness, gst_event_new_flush_start()) != 0)
            #expect(gst_harness_push_event(harness, gst_event_new_flush_stop(1)) != 0)
            var segment = GstSegment()
            gst_segment_init(&segment, GST_FORMAT_TIME)
            #expect(gst_harness_push_event(harness, gst_event_new_segment(&segment)) != 0)
            #expect(gst_harness_push(harness, frame(10)) == GST_FLOW_OK)
            #expect(pull(harness, count: 1, within: 5) == 1)
            let seen = order.seen.withLock { $0 }
            let afterFlush = Array(seen.drop { $0 != "flush-stop" }.dropFirst())
            #expect(afterFlush == ["segment", "tag", "test-sticky", "buffer 10"], "\(seen)")
            #expect(!seen.contains("test-plain"), "\(seen)")
            let kept = gst_pad_get_sticky_event(harness.pointee.sinkpad, GST_EVENT_TAG, 0)
            #expect(kept != nil)
            if let kept {
                var list: UnsafeMutablePointer<GstTagList>?
                gst_event_parse_tag(kept, &list)
                let text = list.flatMap { gst_tag_list_to_string($0) }
                #expect(text.map { String(cString: $0).contains("kept-across-the-flush") } == true, "\(text.map { String(cString: $0) } ?? "-")")
                g_free(text)
                gst_event_unref(kept)
            }
        }
    }

    /// What downstream answers the release thread's push (here EOS: downstream wants no more) reaches
    /// upstream on its next buffer, as it would from a push on the streaming thread.
    @Test func aDownstreamFlowReachesUpstream() throws {
        withSlowHarness("delay-flow", "async-delay=150") { harness in
            #expect(gst_harness_push(harness, frame(0)) == GST_FLOW_OK)
            // Downstream goes EOS while the frame is held: its push will be answered with EOS.
            #expect(gst_pad_send_event(harness.pointee.sinkpad, gst_event_new_eos()) != 0)
            var flow = GST_FLOW_OK, index = 1
            let deadline = Date().addingTimeInterval(5)
            while flow == GST_FLOW_OK && Date() < deadline {
                flow = gst_harness_push(harness, frame(index))
                index += 1
                Thread.sleep(forTimeInterval: 0.05)
            }
            #expect(flow == GST_FLOW_EOS)
        }
    }

    /// Inference fails while upstream waits for room at `async-max-frames`: the held frames are
    /// dropped, and the waiting push returns the error instead of waiting for good (the release
    /// thread that empties the queue wakes the streaming thread; before, that wake-up could be
    /// lost, a hang that even a state change could not end).
    @Test func aFailedInferenceEndsTheWaitForRoom() throws {
        withHarness("delay-failure", "async-delay=5000 async-max-frames=2",
                    wrapping: { FailingEngine($0, frameMs: 300, failAt: 2) }) { harness in
            let flow = Locked(GST_FLOW_OK), pushed = Locked(0)
            let done = DispatchSemaphore(value: 0)
            let address = Int(bitPattern: UnsafeMutableRawPointer(harness))
            let pusher = Thread {
                let harness = UnsafeMutableRawPointer(bitPattern: address)!.assumingMemoryBound(to: GstHarness.self)
                for index in 0..<12 {
                    let result = gst_harness_push(harness, frame(index))
                    flow.withLock { $0 = result }
                    if result != GST_FLOW_OK { break }
                    pushed.withLock { $0 += 1 }
                }
                done.signal()
            }
            pusher.start()
            Thread.sleep(forTimeInterval: 0.2)  // (before inference fails, at 0.6 s)
            #expect(pushed.withLock { $0 } == 2, "the third push waits for room")
            let returned = done.wait(timeout: .now() + 15) == .success
            #expect(returned, "the push waiting for room never returned after inference failed")
            if !returned {
                // (Frees the stuck push, so that the teardown does not hang as well.)
                _ = gst_pad_push_event(harness.pointee.srcpad, gst_event_new_flush_start())
                _ = done.wait(timeout: .now() + 5)
            }
            #expect(flow.withLock { $0 } == GST_FLOW_ERROR)
        }
    }

    /// Stopping the element waits for the inference thread until it holds nothing: the engine is
    /// freed as the element stops, on the thread that stops it, never by the inference thread after
    /// `set_state` returned (at a process's exit that thread freed it while the exit handlers ran,
    /// and an exit cut it short). After frames the inference thread worked on; with a release
    /// thread and without.
    @Test(arguments: ["", "async-delay=150"]) func stoppingFreesTheEngineBeforeItReturns(properties: String) throws {
        let inferred = Locked(0), freedOn = Locked<pthread_t?>(nil)
        withHarness(properties.isEmpty ? "stop-frees" : "stop-frees-delayed", properties, wrapping: { engine in
            FreeRecordingEngine(engine, onMatte: { inferred.withLock { $0 += 1 } }, onFree: { freedOn.withLock { $0 = pthread_self() } })
        }) { harness in
            var index = 0
            while inferred.withLock({ $0 }) < 3, index < 200 {
                #expect(gst_harness_push(harness, frame(index)) == GST_FLOW_OK)
                while let buffer = gst_harness_try_pull(harness) { gst_buffer_unref(buffer) }
                index += 1
                Thread.sleep(forTimeInterval: 0.03)
            }
            #expect(inferred.withLock { $0 } >= 3, "the inference thread worked on \(inferred.withLock { $0 }) frames of \(index)")
            #expect(freedOn.withLock { $0 } == nil, "the engine was freed while the element played")
            #expect(gst_element_set_state(harness.pointee.element, GST_STATE_NULL) == GST_STATE_CHANGE_SUCCESS)
            let freer = freedOn.withLock { $0 }
            #expect(freer != nil, "the engine was still alive when the element had stopped")
            #expect(freer.map { pthread_equal($0, pthread_self()) != 0 } ?? false, "the engine was freed on another thread than the one that stopped the element")
        }
    }

    /// At `async-max-frames` upstream waits (no frame is dropped) until the oldest leaves.
    @Test func upstreamWaitsAtTheBound() throws {
        // (Inference outlasts the delay: no frame leaves early with its own alpha.)
        withSlowHarness("delay-bound", "async-delay=3000 async-max-frames=3", frameMs: 4000) { harness in
            let pushed = Locked(0)
            let done = DispatchSemaphore(value: 0)
            let address = Int(bitPattern: UnsafeMutableRawPointer(harness))
            let pusher = Thread {
                let harness = UnsafeMutableRawPointer(bitPattern: address)!.assumingMemoryBound(to: GstHarness.self)
                for index in 0..<6 {
                    _ = gst_harness_push(harness, frame(index))
                    pushed.withLock { $0 += 1 }
                }
                done.signal()
            }
            pusher.start()
            Thread.sleep(forTimeInterval: 1.5)  // (half the delay: nothing may have left yet)
            #expect(pushed.withLock { $0 } == 3, "pushes returned while 3 frames were held")
            #expect(pull(harness, count: 6, within: 30) == 6)
            #expect(done.wait(timeout: .now() + 10) == .success)
        }
    }

    /// The answer to upstream's ALLOCATION query asks for the frames the element may hold, and for
    /// the two input buffers the inference thread reads (one waiting, one under inference, no
    /// copy), with or without a delay.
    @Test(arguments: [("async-delay=100 async-max-frames=7", 7 + 2), ("async-delay=0", 2)])
    func theAllocationAnswerDeclaresTheBuffersHeld(properties: String, expected: Int) throws {
        try withSlowHarness("allocation-\(expected)", properties) { harness in
            let caps = gst_caps_from_string(self.caps)!
            defer { gst_caps_unref(caps) }
            let query = gst_query_new_allocation(caps, 1)!
            defer { gst_query_unref(query) }
            #expect(gst_pad_peer_query(harness.pointee.srcpad, query) != 0)
            try #require(gst_query_get_n_allocation_pools(query) >= 1)
            var pool: UnsafeMutablePointer<GstBufferPool>?
            var size: guint = 0, minimum: guint = 0, maximum: guint = 0
            gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &minimum, &maximum)
            if let pool { gst_object_unref(pool) }
            #expect(Int(minimum) >= expected, "minimum buffers \(minimum) with \(properties)")
        }
    }

    /// Live: a source at 30 fps, a slow engine (every frame waits its whole delay), a syncing sink
    /// that drops what is more than 20 ms late. The latency reported is what a frame waits: none is
    /// dropped. (Before, frames left with the next input, up to a frame interval past their delay.)
    /// A timing claim: not under ThreadSanitizer, where every thread runs several times slower (its
    /// thread-safety is checked there by the other tests of this suite).
    @Test(.enabled(if: dlsym(nil, "__tsan_init") == nil)) func aSyncingSinkDropsNoneOfTheDelayedFrames() {
        var run = LiveRun()
        _ = SlowEngineTests().withSlowEngines("delay-live", seedMs: 300, frameMs: 300) {
            run = runLive("videotestsrc is-live=true pattern=ball num-buffers=120 ! \(caps) "
                          + "! \(TestPaths.element) name=delay-live mode=async async-delay=150 stats-interval=1 "
                          + "! fakesink name=sink sync=true qos=true max-lateness=20000000", element: "delay-live")
        }
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.reachedEOS)
        #expect(run.sinkDrops == 0, "frames the sink dropped as late: \(run.sinkDrops)")
        #expect(run.processed == 120)
    }
}

/// What reached the harness's sink, in order: buffers, and custom events by name.
private final class Order {
    let seen = Locked<[String]>([])
    /// Buffers named with their frame index (pts ÷ a 30 fps frame).
    let withPts: Bool
    init(withPts: Bool = false) { self.withPts = withPts }
}

private let recordOrder: GstPadProbeCallback = { _, info, data in
    let order = Unmanaged<Order>.fromOpaque(data!).takeUnretainedValue()
    let type = info!.pointee.type.rawValue
    if type & GST_PAD_PROBE_TYPE_BUFFER.rawValue != 0 {
        let buffer = info!.pointee.data!.assumingMemoryBound(to: GstBuffer.self)
        order.seen.withLock { $0.append(order.withPts ? "buffer \(buffer.pointee.pts / 33_333_333)" : "buffer") }
    } else if let event = info!.pointee.data?.assumingMemoryBound(to: GstEvent.self) {
        if event.pointee.type == GST_EVENT_FLUSH_STOP {
            order.seen.withLock { $0.append("flush-stop") }
        } else if event.pointee.type == GST_EVENT_TAG {
            order.seen.withLock { $0.append("tag") }
        } else if event.pointee.type == GST_EVENT_SEGMENT {
            order.seen.withLock { $0.append("segment") }
        } else if event.pointee.type == GST_EVENT_CUSTOM_DOWNSTREAM || event.pointee.type == GST_EVENT_CUSTOM_DOWNSTREAM_STICKY,
                  let structure = gst_event_get_structure(event) {
            order.seen.withLock { $0.append(String(cString: gst_structure_get_name(structure))) }
        }
    }
    return GST_PAD_PROBE_OK
}

/// A real engine whose `failAt`-th frame (1-based) fails as a model can, each taking `frameMs`.
private final class FailingEngine: ForwardingEngine {
    let frameMs: Double, failAt: Int
    private let frames = Locked(0)

    init(_ inner: MattingEngine, frameMs: Double, failAt: Int) {
        self.frameMs = frameMs
        self.failAt = failAt
        super.init(inner)
    }

    override func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        let index = frames.withLock { count -> Int in
            count += 1
            return count
        }
        Thread.sleep(forTimeInterval: frameMs / 1000)
        if index >= failAt { throw EngineError.inference(detail: "test: frame \(index) fails") }
        try inner.matte(frame, into: alpha, report: &report)
    }
}

/// A real engine that says when it works on a frame and when it is freed (and on which thread: the
/// caller's `onFree` runs in its deinit).
private final class FreeRecordingEngine: ForwardingEngine {
    let onMatte: () -> Void, onFree: () -> Void

    init(_ inner: MattingEngine, onMatte: @escaping () -> Void, onFree: @escaping () -> Void) {
        self.onMatte = onMatte
        self.onFree = onFree
        super.init(inner)
    }

    deinit { onFree() }

    override func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        onMatte()
        try inner.matte(frame, into: alpha, report: &report)
    }
}
