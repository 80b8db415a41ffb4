import CGStreamer
import CGstCheck
import Foundation
import Testing
@testable import MatteElement
import MatteEngine
import MattePixels
import TestPaths

/// The four faults a review of the frame path found (issue 44), each driven through the real code:
/// async flow errors without a bus message, a stop that waited for a model load, a mask timeout
/// worded as a decoding failure, buffers released under the inference mailbox's lock.
@Suite(.serialized) struct ReviewFaultTests {
    // MARK: 1. Async flow errors post a STREAM error

    /// A buffer smaller than its caps cannot be mapped as a frame: in async mode the flow stops with
    /// an ERROR on the bus naming that, not only upstream's "Internal data stream error".
    @Test func anUnmappableBufferInAsyncModePostsAStreamError() throws {
        precondition(gstreamerReady)
        let harness = gst_harness_new_parse("matanyone name=m mode=async engine=segmenter model-dir=\"\(TestPaths.modelDir)\"")!
        defer { gst_harness_teardown(harness) }
        let bus = gst_bus_new()!
        defer { gst_object_unref(bus) }
        gst_element_set_bus(harness.pointee.element, bus)
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=64,height=64,framerate=25/1")
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8,width=64,height=64,framerate=25/1")
        // (64×64 BGRA needs 16384 bytes; 100 are given.)
        let flow = gst_harness_push(harness, gst_buffer_new_allocate(nil, 100, nil))
        #expect(flow == GST_FLOW_ERROR)
        let message = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR)
        #expect(message != nil, "no ERROR message on the bus for the failed frame")
        guard let message else { return }
        defer { gst_message_unref(message) }
        var error: UnsafeMutablePointer<GError>?
        gst_message_parse_error(message, &error, nil)
        defer { if let error { g_error_free(error) } }
        let text = error.map { String(cString: $0.pointee.message) } ?? ""
        #expect(error?.pointee.domain == gst_stream_error_quark())
        #expect(error?.pointee.code == Int32(GST_STREAM_ERROR_FAILED.rawValue))
        #expect(text.contains("could not be mapped"), "\(text)")
    }

    // MARK: 2. Stopping or renegotiating during a model load

    /// set_state(NULL) while the async engine is still loading (made slow: 4 s) returns within one
    /// second; the load finishes on its own thread and everything it made is let go.
    @Test func stoppingDuringAModelLoadReturnsWithinOneSecond() throws {
        precondition(gstreamerReady)
        let name = "slow-load"
        let made = Locked(0)
        EngineWrappers.set({ engine in
            Thread.sleep(forTimeInterval: 4)
            made.withLock { $0 += 1 }
            return engine
        }, forElementNamed: name)
        defer { EngineWrappers.set(nil, forElementNamed: name) }
        var parseError: UnsafeMutablePointer<GError>?
        let pipeline = try #require(gst_parse_launch(
            "videotestsrc is-live=true ! video/x-raw,format=BGRA,width=64,height=64,framerate=30/1 "
                + "! matanyone name=\(name) mode=async engine=segmenter model-dir=\"\(TestPaths.modelDir)\" ! fakesink", &parseError))
        EngineWrappers.inject(into: pipeline)
        gst_element_set_state(pipeline, GST_STATE_PLAYING)
        _ = gst_element_get_state(pipeline, nil, nil, 5_000_000_000)
        Thread.sleep(forTimeInterval: 0.5)  // (frames flow, the load goes on)
        let start = Date()
        gst_element_set_state(pipeline, GST_STATE_NULL)
        let seconds = Date().timeIntervalSince(start)
        let madeAtStop = made.withLock { $0 }
        #expect(AbandonedLoads.count == 1, "the stop did not leave the load to its thread")
        // The last unref (the element's finalize) waits for the load: an application that unrefs and
        // exits never runs its exit handlers, ONNX Runtime's destructors among them, under a load.
        gst_object_unref(pipeline)
        #expect(seconds < 1, "set_state(NULL) took \(seconds) s during a model load")
        #expect(madeAtStop == 0, "the load had finished before the stop: the test proved nothing")
        #expect(made.withLock { $0 } == 1, "the element was finalized while its abandoned load still ran")
        #expect(AbandonedLoads.count == 0)
    }

    /// The inference thread itself: `stop` (as a renegotiation to another size calls it) does not wait
    /// for a load; the load ends on its own, and the thread with it (nothing left alive).
    @Test func theInferenceThreadIsNotWaitedForWhileItLoads() throws {
        let loading = DispatchSemaphore(value: 0)
        weak var abandoned: AsyncMatting?
        do {
            let matting = AsyncMatting(engines: EngineSlot(making: {
                loading.signal()
                Thread.sleep(forTimeInterval: 2)
                throw EngineError.badSettings(detail: "the test's load")
            }), width: 8, height: 8)
            abandoned = matting
            matting.start()
            #expect(loading.wait(timeout: .now() + 5) == .success)
            let start = Date()
            matting.stop()
            let seconds = Date().timeIntervalSince(start)
            #expect(seconds < 1, "stop waited \(seconds) s for the load")
        }
        // The thread still holds it while its load runs; then it ends and lets go.
        let deadline = Date().addingTimeInterval(10)
        while abandoned != nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(abandoned == nil, "the abandoned inference thread never ended")
    }

    /// A thread abandoned during a load and the next size's thread get the same engine when the load
    /// ends: the abandoned one does not warm it up (at the old size) and the two never run it at once.
    @Test func anAbandonedLoadNeverRunsTheEngineBesideTheNextSizesThread() throws {
        let proceed = DispatchSemaphore(value: 0)
        let loading = DispatchSemaphore(value: 0)
        let made = Locked<WarmUpRecorder?>(nil)
        let slot = EngineSlot(making: {
            loading.signal()
            proceed.wait()
            let engine = WarmUpRecorder(try SegmenterEngine(options: EngineOptions(modelDir: TestPaths.modelDir)))
            made.withLock { $0 = engine }
            return engine
        })
        let old = AsyncMatting(engines: slot, width: 32, height: 32)
        old.start()
        #expect(loading.wait(timeout: .now() + 5) == .success)
        old.stop()  // (abandoned: it is loading)
        let new = AsyncMatting(engines: slot, width: 64, height: 64)
        new.start()
        proceed.signal()
        var info = GstVideoInfo()
        gst_video_info_set_format(&info, GST_VIDEO_FORMAT_BGRA, 64, 64)
        precondition(gstreamerReady)
        let buffer = gst_buffer_new_allocate(nil, gsize(info.size), nil)!
        new.submit(OwnedBuffer(taking: buffer), info: info, pts: 1)
        let deadline = Date().addingTimeInterval(30)
        while new.closest(to: 1).alpha == nil, new.closest(to: 1).failure == nil, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(new.closest(to: 1).alpha != nil, "no alpha from the next size's thread: \(String(describing: new.closest(to: 1).failure))")
        new.stop()
        let recorder = try #require(made.withLock { $0 })
        #expect(recorder.sizes == ["64x64"], "warm-ups: \(recorder.sizes)")
        #expect(recorder.mostAtOnce == 1)
    }

    // MARK: 3. A mask's bus timeout says so

    @Test func aMaskThatTimesOutSaysItTimedOut() throws {
        precondition(gstreamerReady)
        let path = "\(TestPaths.dataDir)/test-sample2-mask-512x288.png"
        // (No time at all to decode: the answer must be the timeout, not "not an image".)
        MaskLoader.decodeTimeouts.withLock { $0[path] = 0 }
        do {
            _ = try MaskLoader.load(path)
            Issue.record("a mask loaded with no time to decode it")
        } catch {
            let text = "\(error)"
            #expect(text.contains("timed out"), "\(text)")
            #expect(!text.contains("not an image"), "\(text)")
        }
        MaskLoader.decodeTimeouts.withLock { $0[path] = nil }
        // The same file with the usual timeout loads (the file is fine; the wording was the fault).
        #expect(try MaskLoader.load(path).width == 512)
    }

    // MARK: 4. No buffer released under the mailbox lock

    /// Every way a waiting frame is dropped (replaced, forgotten by a reset, dropped by a failed load,
    /// dropped after the failure) releases its buffer with the mailbox lock free.
    @Test func noBufferIsReleasedUnderTheMailboxLock() throws {
        precondition(gstreamerReady)
        let releases = ReleaseLog()
        let proceed = DispatchSemaphore(value: 0)
        let matting = AsyncMatting(engines: EngineSlot(making: {
            proceed.wait()
            throw EngineError.badSettings(detail: "the test's load fails")
        }), width: 8, height: 8)
        var info = GstVideoInfo()
        gst_video_info_set_format(&info, GST_VIDEO_FORMAT_BGRA, 8, 8)
        func frame(_ pts: UInt64) -> OwnedBuffer {
            let buffer = gst_buffer_new_allocate(nil, gsize(info.size), nil)!
            releases.watch(buffer)
            return OwnedBuffer(taking: buffer)
        }
        matting.start()
        matting.submit(frame(1), info: info, pts: 1)
        matting.submit(frame(2), info: info, pts: 2)  // (replaces 1)
        matting.reset()                               // (forgets 2)
        matting.submit(frame(3), info: info, pts: 3)
        proceed.signal()                              // (the load fails: 3 is dropped)
        let deadline = Date().addingTimeInterval(10)
        while matting.closest(to: 0).failure == nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(matting.closest(to: 0).failure != nil)
        matting.submit(frame(4), info: info, pts: 4)  // (after the failure: dropped by the thread)
        while releases.count < 4, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        matting.stop()
        #expect(releases.count == 4, "\(releases.count) of 4 buffers released")
        #expect(releases.underLock == 0, "\(releases.underLock) buffers released under the mailbox lock")
    }
}

/// Counts the buffers it watches as they are freed, and how many of them were freed by a thread
/// holding an inference mailbox's lock.
final class ReleaseLog {
    private let state = Locked((count: 0, underLock: 0))
    var count: Int { state.withLock { $0.count } }
    var underLock: Int { state.withLock { $0.underLock } }

    func watch(_ buffer: UnsafeMutablePointer<GstBuffer>) {
        let object = UnsafeMutableRawPointer(buffer).assumingMemoryBound(to: GstMiniObject.self)
        gst_mini_object_weak_ref(object, { data, _ in
            let log = Unmanaged<ReleaseLog>.fromOpaque(data!).takeUnretainedValue()
            let held = MailboxMark.heldByCurrentThread
            log.state.withLock { state in
                state.count += 1
                if held { state.underLock += 1 }
            }
        }, Unmanaged.passUnretained(self).toOpaque())
    }
}

/// A real engine that records its warm-ups (slowed, so that two at once would overlap) and how many
/// threads were ever inside it at once.
final class WarmUpRecorder: ForwardingEngine {
    private let state = Locked((sizes: [String](), inside: 0, most: 0))
    var sizes: [String] { state.withLock { $0.sizes } }
    var mostAtOnce: Int { state.withLock { $0.most } }

    private func inside<T>(_ body: () throws -> T) rethrows -> T {
        state.withLock { $0.inside += 1; $0.most = max($0.most, $0.inside) }
        defer { state.withLock { $0.inside -= 1 } }
        return try body()
    }

    override func warmUp(width: Int, height: Int) throws -> Double {
        try inside {
            state.withLock { $0.sizes.append("\(width)x\(height)") }
            Thread.sleep(forTimeInterval: 0.3)
            return try inner.warmUp(width: width, height: height)
        }
    }

    override func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        try inside { try inner.matte(frame, into: alpha, report: &report) }
    }
}
