/// The motion's data and what its kernels offer (MattePixels.MotionCarry and OpticalFlow run them).

/// A displacement per pixel: the point (x + dx, y + dy) of the other frame shows what (x, y) of this
/// one shows, in pixels of the field's own size.
public struct FlowField {
    public let width: Int, height: Int
    public var dx: [Float]
    public var dy: [Float]

    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
        dx = [Float](repeating: 0, count: width * height)
        dy = [Float](repeating: 0, count: width * height)
    }
}

/// A float luma plane (values 0…1), row-major without padding.
public struct LumaPlane {
    public let width: Int, height: Int
    public var values: [Float]

    public init(width: Int, height: Int, values: [Float]) {
        precondition(values.count == width * height)
        self.width = width
        self.height = height
        self.values = values
    }
}

/// How the dense Lucas–Kanade motion is estimated.
public struct FlowParameters: Equatable, Sendable {
    /// Window radius of the per-pixel least squares (a (2r+1)² window).
    public var radius = 2
    /// Refinements per pyramid level, and at the finest level refined (where a pass costs most and
    /// the coarser levels have already found the motion).
    public var iterations = 3
    public var finestIterations = 1
    /// Coarsest level's short side is at least this many pixels.
    public var coarsestSide = 12
    /// Tikhonov term added to the structure tensor: flat areas keep the coarser level's motion
    /// instead of amplifying noise (in squared luma gradient per window pixel).
    public var regularization: Float = 1e-5
    /// Largest update of one refinement (px): a wrong linearisation cannot throw the motion away.
    public var maxStep: Float = 2
    /// The finest pyramid level refined (0: the planes' own size; 1: half, the result upsampled):
    /// a cheaper, coarser estimate.
    public var finestLevel = 0
    /// Spread the motion over flat areas after every refinement (else once per level).
    public var smoothEveryIteration = true
    public init() {}
}

/// Sizes of the carry's work: motion at `flow`, the alpha warped at `carry` (twice the motion's size).
public struct MotionSizes: Equatable {
    public let flowWidth: Int, flowHeight: Int
    public let carryWidth: Int, carryHeight: Int

    /// For a frame: the carry at most 512×288 worth of pixels (MatAnyone2's working size for a
    /// 16:9 frame), the motion at half of it; never larger than the frame.
    public init(frameWidth: Int, frameHeight: Int) {
        let scale = min(1, (Double(512 * 288) / Double(max(1, frameWidth * frameHeight))).squareRoot())
        carryWidth = max(1, min(frameWidth, Int((Double(frameWidth) * scale).rounded())))
        carryHeight = max(1, min(frameHeight, Int((Double(frameHeight) * scale).rounded())))
        flowWidth = max(1, carryWidth / 2)
        flowHeight = max(1, carryHeight / 2)
    }
}

/// What one carry did.
public struct CarriedMotion: Equatable {
    /// Frames carried over (0: the alpha was the frame's own).
    public let frames: Int
    /// Mean displacement under the alpha, in frame pixels (weighted by the carried alpha).
    public let meanPixels: Double

    public init(frames: Int, meanPixels: Double) {
        self.frames = frames
        self.meanPixels = meanPixels
    }
}

/// Which steps of motion a carry trusts: `photometric` where the warped previous frame matches,
/// `none` every step inside the frame (for measuring what the rule is worth).
public enum TrustRule: String, CaseIterable, Sendable { case photometric, none }

/// Dense motion between two luma planes (see MattePixels.OpticalFlow).
public protocol FlowEstimating: AnyObject {
    init(parameters: FlowParameters)
    func flow(from source: LumaPlane, to target: LumaPlane) -> FlowField
    /// The luma of `frame` averaged down to `width`×`height`.
    static func luma(of frame: BGRAImage, width: Int, height: Int) -> LumaPlane
}

/// One frame's motion back to the frame before it and the trust in it (nil for a first frame: the
/// motion kept before it leads nowhere). Made by `estimate`, kept by `insert`.
public struct MotionStep {
    public let pts: UInt64
    public let back: FlowField?
    public let trust: [Float]?

    public init(pts: UInt64, back: FlowField?, trust: [Float]?) {
        self.pts = pts
        self.back = back
        self.trust = trust
    }
}

/// A stale alpha carried along the motion (see MattePixels.MotionCarry).
public protocol MotionCarrying: AnyObject {
    init(frameWidth: Int, frameHeight: Int, capacity: Int, flow: FlowParameters)
    var lumaTolerance: Float { get set }
    var rule: TrustRule { get set }
    func reset()
    func add(_ frame: BGRAImage, pts: UInt64)
    func estimate(_ frame: BGRAImage, pts: UInt64) -> MotionStep
    func insert(_ step: MotionStep)
    func follow(from: UInt64)
    func knows(from: UInt64, to: UInt64) -> Bool
    func carrySized(_ alpha: GrayView) -> [Float]
    func carry(_ alpha: [Float], from: UInt64, to: UInt64, into destination: GrayImage) -> CarriedMotion?
}
