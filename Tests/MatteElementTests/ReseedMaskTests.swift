import CGStreamer
import CGstCheck
import Foundation
import Testing
@testable import MatteElement
import TestPaths

/// A `matanyone-reseed` event with a mask: the mask is decoded off the thread that delivers the
/// event (a serialized event must not hold the stream while an image decodes), and requests count in
/// the order they were made.
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

    private func run(seedMask: String, pushes: Int, between: ((UnsafeMutablePointer<GstElement>, Int) -> Void)? = nil) throws -> [[UInt8]] {
        try harnessOutputs("matanyone name=m engine=matanyone2 model-dir=\"\(TestPaths.modelDir)\" warmup=0 "
                           + "seed=mask seed-mask=\"\(seedMask)\"", frame: frame, pushes: pushes, between: between)
    }

    /// Sends `matanyone-reseed, mask=PATH` downstream into the element's sink pad, on this thread.
    private func sendReseed(_ element: UnsafeMutablePointer<GstElement>, mask: String) -> Bool {
        let structure = gst_structure_new_empty("matanyone-reseed")!
        shim_structure_set_string(structure, "mask", mask)
        return gst_element_send_event(element, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM, structure)) != 0
    }

    /// Holds the loading of `maskB` until `release` is signalled (or 10 s passed), noting whether it
    /// ran on the thread that delivered the event and whether it was let go rather than timed out.
    private final class HeldLoad {
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let seen = Locked<(onDeliveringThread: Bool, released: Bool)?>(nil)
        let deliverer = pthread_self()

        func hook() {
            let onDeliverer = pthread_equal(pthread_self(), deliverer) != 0
            started.signal()
            let released = release.wait(timeout: .now() + 10) == .success
            seen.withLock { $0 = (onDeliverer, released) }
        }
    }

    @Test func theEventReturnsWhileTheMaskLoadsAndTheMaskSeedsTheNextFrames() throws {
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
            }
            if index == 2 {
                // Frame 1 went through while the mask was held; now it may load.
                held.release.signal()
                Thread.sleep(forTimeInterval: 0.5)  // (the decode of a small PNG, with margin)
            }
        }
        #expect(delivered)
        let seen = held.seen.withLock { $0 }
        #expect(seen?.onDeliveringThread == false, "the mask loaded on the thread that delivered the event")
        #expect(seen?.released == true, "the event waited for the load")
        #expect(maxDifference(outputs[2], onlyB[0]) <= 1, "the loaded mask did not seed the next frame")
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
