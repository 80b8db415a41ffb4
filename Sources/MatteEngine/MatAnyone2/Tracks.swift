import Foundation
import MattePixels

/// One change to a person slot, on the frame the tracks hold.
enum TrackOperation: Equatable {
    /// An ordinary frame for a slot that tracks.
    case step(Int)
    /// A seed (alpha at working size, in [0, 1]) and its warm-up passes (nil: the configured count).
    case start(Int, seed: [Float], warmupPasses: Int?)
    /// The slot forgets its person.
    case stop(Int)

    var slot: Int {
        switch self {
        case let .step(slot), let .start(slot, _, _), let .stop(slot): return slot
        }
    }
}

/// Every person slot of MatAnyone2 at one working size: a frame goes in once (`load`), a batch of
/// operations runs on it (`run`: the frame is encoded once for every slot), and each tracking
/// slot's alpha comes out. The engine (`MatAnyone2Engine`) keeps everything else: seeding, the
/// quality watch, the union of people, resampling. Two homes: this process (`LocalTracks`, ONNX
/// Runtime) or an inference server (`RemoteTracks`).
protocol Tracks: AnyObject {
    var width: Int { get }
    var height: Int { get }
    var slots: Int { get }
    func isTracking(_ slot: Int) -> Bool
    /// A tracking slot's alpha at working size: `height` rows of `width`, `alphaStride` apart.
    func alpha(_ slot: Int) -> UnsafePointer<Float>
    var alphaStride: Int { get }
    func memoryFrames(_ slot: Int) -> Int
    /// The slot's uncertainty of its last ordinary frame over `person` (a mask at working size).
    func meanUncertainty(_ slot: Int, over person: [Bool]) throws -> Double
    /// The frame, scaled to the working size by `down`, becomes the one operations run on.
    func load(_ frame: BGRAImage, through down: Resampler)
    /// A black frame (the warm-up's).
    func loadBlack()
    /// Runs the operations in order on the loaded frame.
    func run(_ operations: [TrackOperation]) throws
    /// Every slot stops (a new stream, a seek, new caps).
    func reset()
    func clearTimings()
    /// Model time since `clearTimings`, in `MatAnyone2Core.Model` order (the shared encoder once).
    var modelMs: [Double] { get }
    /// The memory reads' (and the glue's) time since `clearTimings`.
    var memoryMs: Double { get }
    /// One slot's own time since `clearTimings` (0 where not known).
    func personMs(_ slot: Int) -> Double
}

extension Tracks {
    var isTrackingAnyone: Bool { (0..<slots).contains { isTracking($0) } }

    /// A slot's last alpha as a person mask (alpha > 0.5), `width`×`height`.
    func personMask(_ slot: Int) -> [Bool] {
        var mask = [Bool](repeating: false, count: width * height)
        let source = alpha(slot), stride = alphaStride
        for y in 0..<height {
            for x in 0..<width { mask[y * width + x] = source[y * stride + x] > 0.5 }
        }
        return mask
    }
}

/// The tracks in this process: one `MatAnyone2Core` per slot, the first owning the encoder's tensors.
final class LocalTracks: Tracks {
    let cores: [MatAnyone2Core]
    /// Whether the loaded frame has been through the encoder.
    private var encoded = false

    init(cores: [MatAnyone2Core]) {
        precondition(!cores.isEmpty)
        self.cores = cores
    }

    var width: Int { cores[0].width }
    var height: Int { cores[0].height }
    var slots: Int { cores.count }
    var alphaStride: Int { cores[0].paddedWidth }
    func isTracking(_ slot: Int) -> Bool { cores[slot].started }
    func alpha(_ slot: Int) -> UnsafePointer<Float> { cores[slot].alpha }
    func memoryFrames(_ slot: Int) -> Int { cores[slot].memoryFrames }
    func meanUncertainty(_ slot: Int, over person: [Bool]) throws -> Double { try cores[slot].meanUncertainty(over: person) }

    func load(_ frame: BGRAImage, through down: Resampler) {
        let primary = cores[0]
        down.bgraToRGB(frame, into: primary.imageOrigin, pixelStep: 1, rowStride: primary.paddedWidth,
                       planeStride: primary.imagePlaneStride)
        encoded = false
    }

    func loadBlack() {
        cores[0].image.fill(0)
        encoded = false
    }

    func run(_ operations: [TrackOperation]) throws {
        for operation in operations {
            let core = cores[operation.slot]
            switch operation {
            case .step:
                try encodeOnce()
                try core.step(encoded: true)
            case let .start(_, seed, warmupPasses):
                try encodeOnce()
                try core.start(seed: seed, warmupPasses: warmupPasses, encoded: true)
            case .stop:
                core.reset()
            }
        }
    }

    private func encodeOnce() throws {
        if encoded { return }
        try cores[0].encode()
        encoded = true
    }

    func reset() { cores.forEach { $0.reset() } }
    func clearTimings() { cores.forEach { $0.clearTimings() } }
    var modelMs: [Double] { cores[0].modelMs.indices.map { index in cores.reduce(0) { $0 + $1.modelMs[index] } } }
    var memoryMs: Double { cores.reduce(0) { $0 + $1.memoryMs } }
    func personMs(_ slot: Int) -> Double {
        cores[slot].memoryMs + cores[slot].modelMs.dropFirst().reduce(0, +)  // [0] is the shared encoder
    }
}
