import Dispatch

/// Carries an alpha computed on an older frame to the frame that leaves now, along the picture's own
/// motion since then: every frame adds the motion from its predecessor (`add`); `carry` composes the
/// steps from the alpha's frame to the wanted one and warps the alpha through them, trusting a step
/// where the previous frame warped by it shows what this frame shows (the rule and its reasons:
/// Sources/PixelKernels/MotionCarry.swift). Runs on the kernels of `PixelISA.active`.
public final class MotionCarry {
    public typealias Sizes = MotionSizes
    public typealias Carried = CarriedMotion
    public typealias TrustRule = MattePixelTypes.TrustRule

    public let frameWidth: Int, frameHeight: Int
    public let sizes: Sizes
    /// Time the newest `add` took (ms).
    public private(set) var lastMotionMs = 0.0
    private let kernel: any MotionCarrying

    /// Photometric rule: mean luma difference (0…1) after the warp below which a step is fully
    /// trusted; trust falls linearly to none at twice it.
    public var lumaTolerance: Float {
        get { kernel.lumaTolerance }
        set { kernel.lumaTolerance = newValue }
    }

    public var rule: TrustRule {
        get { kernel.rule }
        set { kernel.rule = newValue }
    }

    /// Keeps the motion of the last `capacity` frames (an alpha older than that leaves stale): 128,
    /// 4.3 s at 30 fps, as old as MatAnyone2's alphas get on two slow cores.
    public init(frameWidth: Int, frameHeight: Int, capacity: Int = 128, flow: FlowParameters = FlowParameters(),
                isa: PixelISA = .active) {
        self.frameWidth = frameWidth
        self.frameHeight = frameHeight
        sizes = Sizes(frameWidth: frameWidth, frameHeight: frameHeight)
        kernel = isa.motionCarry.init(frameWidth: frameWidth, frameHeight: frameHeight, capacity: capacity, flow: flow)
    }

    /// Forgets all motion (a new stream, a seek, a reset track).
    public func reset() { kernel.reset() }

    /// Adds a frame: its motion back to the frame added before it.
    public func add(_ frame: BGRAImage, pts: UInt64) {
        let start = DispatchTime.now().uptimeNanoseconds
        kernel.add(frame, pts: pts)
        lastMotionMs = Double(DispatchTime.now().uptimeNanoseconds - start) / 1_000_000
    }

    /// Keeps the motion from the frame at `from` (whose alpha is coming) composed as frames are added.
    /// The estimating half of `add` (the previous frame's luma only): see `insert`.
    public func estimate(_ frame: BGRAImage, pts: UInt64) -> MotionStep {
        let start = DispatchTime.now().uptimeNanoseconds
        defer { lastMotionMs = Double(DispatchTime.now().uptimeNanoseconds - start) / 1_000_000 }
        return kernel.estimate(frame, pts: pts)
    }

    /// The keeping half of `add`: a step from `estimate`, possibly of another `MotionCarry` (one
    /// thread estimates, another carries).
    public func insert(_ step: MotionStep) { kernel.insert(step) }

    public func follow(from: UInt64) { kernel.follow(from: from) }

    /// Whether the motion from the frame at `from` to the frame at `to` is known.
    public func knows(from: UInt64, to: UInt64) -> Bool { kernel.knows(from: from, to: to) }

    /// The alpha at the carry size (`alpha` is the full-frame plane of the frame at `from`): for
    /// `carry`, made once per alpha.
    public func carrySized(_ alpha: GrayView) -> [Float] { kernel.carrySized(alpha) }

    /// Writes `alpha` (carry-sized, of the frame at `from`) carried to the frame at `to` into
    /// `destination` (full frame); nil (nothing written) when the motion between them is not known.
    public func carry(_ alpha: [Float], from: UInt64, to: UInt64, into destination: GrayImage) -> Carried? {
        kernel.carry(alpha, from: from, to: to, into: destination)
    }
}

/// Coarse-to-fine dense Lucas–Kanade between two luma planes of one size. One instance per size; not
/// thread-safe (it keeps scratch).
public final class OpticalFlow {
    public typealias Parameters = FlowParameters
    public let parameters: Parameters
    private let kernel: any FlowEstimating

    public init(parameters: Parameters = Parameters(), isa: PixelISA = .active) {
        self.parameters = parameters
        kernel = isa.opticalFlow.init(parameters: parameters)
    }

    /// The motion that takes `from` back to `to`: for each pixel p of `from`, `to` shows at
    /// p + field(p) what `from` shows at p.
    public func flow(from source: LumaPlane, to target: LumaPlane) -> FlowField {
        kernel.flow(from: source, to: target)
    }
}

extension LumaPlane {
    /// The luma of `frame` averaged down to `width`×`height` (at most the frame's size): up to 3×3
    /// samples per output pixel, spread over the area it covers.
    public init(frame: BGRAImage, width: Int, height: Int, isa: PixelISA = .active) {
        self = isa.opticalFlow.luma(of: frame, width: width, height: height)
    }
}
