import CGStreamer
import CGstCheck
import Foundation
import Testing
@testable import MatteElement
import TestPaths

/// A `matanyone-reseed` event with a mask: the mask is decoded off the thread that delivers the
/// event (a serialized event must not hold the stream while an image decodes), yet a serialized
/// event acts on exactly the frame after it (that frame waits for the load, bounded), and requests
/// count in the order they were made.
@Suite(.serialized) struct ReseedMaskTests {
    let maskA = "\(TestPaths.dataDir)/test-sample2-mask-512x288.png"
    let frame: [UInt8]
    let maskB: String

    init() throws {
        let frames = try Data(contentsOf: URL(fileURLWithPath: "\(TestPaths.dataDir)/test-sample2-512x288.bgra"))
        frame = [UInt8](frames.prefix(512 * 288 * 4))
        maskB = TestPaths.scratch("reseed-mask") + "/b.png"
        _ = runPipeline("videotestsrc num-buffers=1 pattern=circular ! video/x-raw,format=GRAY8,width=512,height=288 "
                        + "! pngenc ! filesink location=\"\(maskB)\"")
    }

    private func run(seedMask: String, pushes: Int, bus: UnsafeMutablePointer<GstBus>? = nil,
                     between: ((UnsafeMutablePointer<GstElement>, Int) -> Void)? = nil,
                     afterPushes: ((UnsafeMutablePointer<GstElement>) -> Void)? = nil) throws -> [[UInt8]] {
        try harnessOutputs("matanyone name=m engine=matanyone2 precision=fp32 model-dir=\"\(TestPaths.modelDir)\" warmup=0 "
                           + "seed=mask seed-mask=\"\(seedMask)\"", frame: frame, pushes: pushes, bus: bus, between: between,
                           afterPushes: afterPushes)
    }

    /// Sends `matanyone-reseed, mask=PATH` downstream into the element's sink pad, on this thread
    /// (serialized, else out of band).
    private func sendReseed(_ element: UnsafeMutablePointer<GstElement>, mask: String, serialized: Bool = true) -> Bool {
        let structure = gst_structure_new_empty("matanyone-reseed")!
        shim_structure_set_string(structure, "mask", mask)
        let type = serialized ? GST_EVENT_CUSTOM_DOWNSTREAM : GST_EVENT_CUSTOM_DOWNSTREAM_OOB
        return gst_element_send_event(element, gst_event_new_custom(type, structure)) != 0
    }

    /// Holds the loading of `maskB` until `release` is signalled (or 10 s passed), noting whether it
    /// ran on the thread that delivered the event and whether it was let go rather than timed out.
    private final class HeldLoad {
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let seen = Locked<(onDeliveringThread: Bool, released: Bool)?>(nil)
        /// When the hook returned (the load then decodes), as `Date().timeIntervalSinceReferenceDate`.
        let endedAt = Locked<Double?>(nil)
        let deliverer = pthread_self()

        func hook() {
            let onDeliverer = pthread_equal(pthread_self(), deliverer) != 0
            started.signal()
            let released = release.wait(timeout: .now() + 10) == .success
            seen.withLock { $0 = (onDeliverer, released) }
            endedAt.withLock { $0 = Date().timeIntervalSinceReferenceDate }
        }
    }

    @Test func theEventReturnsWhileTheMaskLoadsAndTheFrameAfterItWaitsForTheMask() throws {
        let onlyB = try run(seedMask: maskB, pushes: 1)
        let onlyA = try run(seedMask: maskA, pushes: 1)
        #expect(maxDifference(onlyA[0], onlyB[0]) > 8, "the two masks must seed differently for this test to mean anything")
        let held = HeldLoad()
        MaskLoader.beforeLoading.withLock { $0[maskB] = held.hook }
        defer { MaskLoader.beforeLoading.withLock { $0[maskB] = nil } }
        var delivered = false
        let outputs = try run(seedMask: maskA, pushes: 3) { element, index in
            if index == 1 {
                // If the event waited for the load, it would return only once the load gave up (10 s).
                delivered = sendReseed(element, mask: maskB)
                #expect(held.started.wait(timeout: .now() + 10) == .success, "the mask never started loading")
                // The load goes on shortly after the event returned, while frame 1 is being pushed.
                DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { held.release.signal() }
            }
        }
        #expect(delivered)
        let seen = held.seen.withLock { $0 }
        #expect(seen?.onDeliveringThread == false, "the mask loaded on the thread that delivered the event")
        #expect(seen?.released == true, "the event waited for the load")
        #expect(maxDifference(outputs[1], onlyB[0]) <= 1, "the mask did not seed the frame right after the event")
    }

    /// Frame-exact: a serialized reseed sent before input 3 acts on output 3, with a mask, without
    /// one, and with a mask that is missing (a warning, then the configured seed on that frame).
    @Test func aSerializedReseedActsOnTheFrameAfterIt() throws {
        let onlyA = try run(seedMask: maskA, pushes: 5)
        let onlyB = try run(seedMask: maskB, pushes: 1)
        #expect(maxDifference(onlyA[3], onlyA[0]) > 8, "a reseed must change frame 3 for this test to mean anything")
        func reseeded(mask: String?) throws -> ([[UInt8]], [String]) {
            let bus = gst_bus_new()!
            defer { gst_object_unref(bus) }
            let outputs = try run(seedMask: maskA, pushes: 5, bus: bus) { element, index in
                guard index == 3 else { return }
                if let mask {
                    #expect(sendReseed(element, mask: mask))
                } else {
                    let event = gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM, gst_structure_new_empty("matanyone-reseed"))
                    #expect(gst_element_send_event(element, event) != 0)
                }
            }
            return (outputs, popWarnings(bus))
        }
        let cases: [(String, String?, [UInt8], String?)] = [
            ("mask", maskB, onlyB[0], nil),
            ("no mask", nil, onlyA[0], nil),
            ("missing mask", TestPaths.scratch("reseed-mask") + "/absent.png", onlyA[0], "reseed ignored the mask"),
        ]
        for (name, mask, seeded, warning) in cases {
            let (outputs, warnings) = try reseeded(mask: mask)
            for index in 0..<3 {
                #expect(maxDifference(outputs[index], onlyA[index]) <= 1, "\(name): frame \(index) changed before the event")
            }
            #expect(maxDifference(outputs[3], seeded) <= 1, "\(name): frame 3 was not the one reseeded")
            if let warning {
                #expect(warnings.contains { $0.contains(warning) }, "\(name): \(warnings)")
            } else {
                #expect(!warnings.contains { $0.contains("reseed") }, "\(name): \(warnings)")
            }
        }
    }

    /// A mask slower to load than the bound: the frame after the event waits no longer than the
    /// bound (with a warning), the frames after it do not wait at all, and the mask reseeds the
    /// first frame after it has loaded.
    @Test func aMaskSlowerThanTheBoundReseedsWhenItHasLoaded() throws {
        let onlyA = try run(seedMask: maskA, pushes: 4)
        let onlyB = try run(seedMask: maskB, pushes: 1)
        let held = HeldLoad()
        MaskLoader.beforeLoading.withLock { $0[maskB] = held.hook }
        defer { MaskLoader.beforeLoading.withLock { $0[maskB] = nil } }
        let bus = gst_bus_new()!
        defer { gst_object_unref(bus) }
        var pushStarted = 0.0
        var seconds: [Double] = []
        let outputs = try run(seedMask: maskA, pushes: 4, bus: bus) { element, index in
            if index > 0 { seconds.append(Date().timeIntervalSinceReferenceDate - pushStarted) }
            if index == 1 {
                #expect(sendReseed(element, mask: maskB))
                #expect(held.started.wait(timeout: .now() + 10) == .success)
            }
            if index == 3 {
                held.release.signal()
                Thread.sleep(forTimeInterval: 0.5)  // (the decode of a small PNG, with margin)
            }
            pushStarted = Date().timeIntervalSinceReferenceDate
        }
        let bound = Double(MatteFilter.reseedMaskWaitMs) / 1000
        #expect(seconds[1] >= bound, "frame 1 did not wait for the mask (\(seconds[1]) s)")
        #expect(seconds[2] < seconds[1] - bound / 2, "frame 2 waited again (\(seconds) s)")
        #expect(maxDifference(outputs[1], onlyA[1]) <= 1, "frame 1 was reseeded without its mask")
        #expect(maxDifference(outputs[3], onlyB[0]) <= 1, "the mask did not reseed the first frame after it loaded")
        let warnings = popWarnings(bus)
        #expect(warnings.contains { $0.contains("took longer than") }, "\(warnings)")
    }

    /// Stopping waits for a mask still decoding (no private pipeline outlives the stream: an
    /// application that stops and exits would tear GStreamer down under it), and for no longer than
    /// `maskLoadStopWaitMs`, after which it warns and returns.
    @Test func stoppingWaitsForAMaskStillLoading() throws {
        let bound = Double(MatteFilter.maskLoadStopWaitMs) / 1000
        for holdSeconds in [0.5, bound + 1.5] {
            let held = HeldLoad()
            MaskLoader.beforeLoading.withLock { $0[maskB] = held.hook }
            defer { MaskLoader.beforeLoading.withLock { $0[maskB] = nil } }
            let bus = gst_bus_new()!
            defer { gst_object_unref(bus) }
            var stopping = 0.0
            _ = try run(seedMask: maskA, pushes: 1, bus: bus, afterPushes: { element in
                #expect(sendReseed(element, mask: maskB, serialized: false))
                #expect(held.started.wait(timeout: .now() + 10) == .success, "the mask never started loading")
                DispatchQueue.global().asyncAfter(deadline: .now() + holdSeconds) { held.release.signal() }
                stopping = Date().timeIntervalSinceReferenceDate
            })  // (the harness stops the element as it returns)
            let stopped = Date().timeIntervalSinceReferenceDate
            let warnings = popWarnings(bus)
            if holdSeconds < bound {
                let ended = held.endedAt.withLock { $0 }
                #expect(ended.map { $0 <= stopped } == true, "the element stopped while its mask was loading")
                #expect(!warnings.contains { $0.contains("still loading") }, "\(warnings)")
            } else {
                #expect(stopped - stopping >= bound - 0.05 && stopped - stopping < bound + 1, "stop took \(stopped - stopping) s")
                #expect(held.endedAt.withLock { $0 } == nil, "the held load ended early: the test means nothing")
                #expect(warnings.contains { $0.contains("still loading") }, "\(warnings)")
                // (the held load goes on when its release comes: wait for it, so it ends within this test)
                for _ in 0..<100 where held.endedAt.withLock({ $0 }) == nil { Thread.sleep(forTimeInterval: 0.05) }
            }
        }
    }

    /// A reseed asked for while an earlier request's mask still loads wins: the late mask is not used.
    @Test func aNewerRequestWinsOverAMaskStillLoading() throws {
        let onlyA = try run(seedMask: maskA, pushes: 4)
        let held = HeldLoad()
        MaskLoader.beforeLoading.withLock { $0[maskB] = held.hook }
        defer { MaskLoader.beforeLoading.withLock { $0[maskB] = nil } }
        let outputs = try run(seedMask: maskA, pushes: 5) { element, index in
            if index == 1 {
                #expect(sendReseed(element, mask: maskB))
                #expect(held.started.wait(timeout: .now() + 10) == .success)
                shim_emit_reseed(element)  // newer, no mask: reseeds from seed-mask (A) on the next frame
            }
            if index == 2 { held.release.signal() }
            if index >= 2 { Thread.sleep(forTimeInterval: 0.3) }  // (time for the late mask to arrive, if it were used)
        }
        #expect(held.seen.withLock { $0 }?.released == true)
        #expect(maxDifference(outputs[1], onlyA[0]) <= 1, "the newer reseed did not restart the track from seed-mask")
        for index in 2..<5 {
            #expect(maxDifference(outputs[index], onlyA[index - 1]) <= 1, "frame \(index): the late mask was used")
        }
    }
}
