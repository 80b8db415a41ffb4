import Foundation
import MattePixelTypes

/// Carries an alpha computed on an older frame to the frame that leaves now, along the picture's own
/// motion since then. Every frame adds the motion from its predecessor (`add`); `carry` composes the
/// steps from the alpha's frame to the wanted one and warps the alpha through them.
///
/// The trust rule (`photometric`, the default): a step's motion is trusted where the previous frame,
/// warped by it, shows what this frame shows (mean luma difference over a 5×5 window at the motion's
/// size within `lumaTolerance`) and the point it comes from lies inside the frame; an occluder, a
/// disocclusion or a wrong estimate mismatch. Trust multiplies along the path; where it falls, the
/// carried alpha falls back to the stale alpha at the same place. The carry thus never makes an alpha
/// value that neither the warped nor the stale alpha has at a pixel: where the motion is in doubt it
/// is today's matte. (A forward-backward check instead costs a second estimate and measured worse on
/// the dancer: README, "Live on a CPU".)
public final class MotionCarryKernel: MotionCarrying {
    public typealias Sizes = MotionSizes
    public typealias Carried = CarriedMotion

    private typealias Step = MotionStep

    private struct Accumulated {
        let from: UInt64, to: UInt64
        var field: FlowField
        var trust: [Float]
    }

    public let frameWidth: Int, frameHeight: Int
    public let sizes: Sizes
    /// Photometric rule: mean luma difference (0…1) after the warp below which a step is fully
    /// trusted; trust falls linearly to none at twice it.
    public var lumaTolerance: Float = 0.08
    public var rule = TrustRule.photometric
    private let capacity: Int
    /// The motion from each frame back to its predecessor (what the carry follows).
    private let backward: OpticalFlowKernel
    private var previous: LumaPlane?
    private var previousPts: UInt64?
    private var steps: [Step] = []
    /// The composed motion from each alpha's frame that is carried or may soon be (`follow`), to the
    /// frame it was last carried to: extended by a step a frame, never rebuilt while followed.
    private var accumulated: [UInt64: Accumulated] = [:]
    private var followed: Set<UInt64> = []
    private let up: ResamplerKernel
    /// The motion's size → the carry size (the field and its trust, before the warp).
    private let fieldUp: ResamplerKernel
    private var warped: [Float]

    /// Keeps the motion of the last `capacity` frames (an alpha older than that leaves stale): 128,
    /// 4.3 s at 30 fps, as old as MatAnyone2's alphas get on two slow cores; ~0.45 MB a frame at
    /// 256×144.
    public init(frameWidth: Int, frameHeight: Int, capacity: Int = 128, flow: FlowParameters = FlowParameters()) {
        backward = OpticalFlowKernel(parameters: flow)
        self.frameWidth = frameWidth
        self.frameHeight = frameHeight
        sizes = Sizes(frameWidth: frameWidth, frameHeight: frameHeight)
        self.capacity = max(2, capacity)
        up = ResamplerKernel(sourceWidth: sizes.carryWidth, sourceHeight: sizes.carryHeight, targetWidth: frameWidth, targetHeight: frameHeight)
        fieldUp = ResamplerKernel(sourceWidth: sizes.flowWidth, sourceHeight: sizes.flowHeight,
                            targetWidth: sizes.carryWidth, targetHeight: sizes.carryHeight)
        warped = [Float](repeating: 0, count: sizes.carryWidth * sizes.carryHeight)
    }

    /// Forgets all motion (a new stream, a seek, a reset track).
    public func reset() {
        previous = nil
        previousPts = nil
        steps.removeAll()
        accumulated.removeAll()
        followed.removeAll()
    }

    /// Adds a frame: its motion back to the frame added before it.
    public func add(_ frame: BGRAImage, pts: UInt64) { insert(estimate(frame, pts: pts)) }

    /// A frame's motion back to the frame estimated before it (the estimating half of `add`: it
    /// touches only the previous frame's luma, so one thread may estimate while another carries).
    public func estimate(_ frame: BGRAImage, pts: UInt64) -> MotionStep {
        precondition(frame.width == frameWidth && frame.height == frameHeight)
        let luma = LumaPlane(frame: frame, width: sizes.flowWidth, height: sizes.flowHeight)
        var step = Step(pts: pts, back: nil, trust: nil)
        if let previous, let previousPts, previousPts < pts {
            let back = backward.flow(from: luma, to: previous)
            step = Step(pts: pts, back: back, trust: MotionCarryKernel.trust(back: back, current: luma, previous: previous,
                                                                     tolerance: rule == .photometric ? lumaTolerance : .infinity))
        }
        previous = luma
        previousPts = pts
        return step
    }

    /// Keeps a frame's motion (the keeping half of `add`); a step without motion (a first frame,
    /// time that went back) starts the motion kept over.
    public func insert(_ step: MotionStep) {
        if step.back == nil || !(steps.last.map { $0.pts < step.pts } ?? false) {
            steps.removeAll()  // (time went back: the old motion leads nowhere)
            accumulated.removeAll()
            followed.removeAll()
        }
        let pts = step.pts
        steps.append(step)
        if steps.count > capacity { steps.removeFirst(steps.count - capacity) }
        // The alphas that will be carried get this frame's step now, one compose each: when one of
        // them arrives, its carry is ready (built from every step then, it was a spike of a few ms a
        // step on the streaming thread).
        followed = followed.filter { from in steps.contains { $0.pts == from } }
        for from in followed where from < pts { _ = accumulate(from: from, to: pts) }
        accumulated = accumulated.filter { followed.contains($0.key) }
    }

    /// Keeps the motion from the frame at `from` (a frame added, whose alpha is coming) composed as
    /// frames are added, and stops following frames before the frame at `from`'s predecessors, which
    /// a newer alpha has replaced. At most `maxFollowed` at once (the newest).
    public func follow(from: UInt64) {
        guard steps.contains(where: { $0.pts == from }) else { return }
        followed.insert(from)
        if followed.count > MotionCarryKernel.maxFollowed {
            followed = Set(followed.sorted().suffix(MotionCarryKernel.maxFollowed))
        }
        if let newest = steps.last?.pts, newest > from { _ = accumulate(from: from, to: newest) }
    }

    /// The alpha in use and the one under inference, and one more for an alpha that is late.
    static let maxFollowed = 3

    /// Whether the motion from the frame at `from` to the frame at `to` is known.
    public func knows(from: UInt64, to: UInt64) -> Bool {
        guard from < to, let first = steps.firstIndex(where: { $0.pts == from }),
              let last = steps.lastIndex(where: { $0.pts == to }), last > first else { return false }
        return steps[(first + 1)...last].allSatisfy { $0.back != nil }
    }

    /// The alpha at the carry size (`alpha` is the full-frame plane of the frame at `from`): for
    /// `carry`, made once per alpha.
    public func carrySized(_ alpha: GrayView) -> [Float] {
        precondition(alpha.width == frameWidth && alpha.height == frameHeight)
        return MotionCarryKernel.averaged(alpha, width: sizes.carryWidth, height: sizes.carryHeight)
    }

    /// Writes `alpha` (carry-sized, of the frame at `from`) carried to the frame at `to` into
    /// `destination` (full frame); nil (nothing written) when the motion between them is not known.
    public func carry(_ alpha: [Float], from: UInt64, to: UInt64, into destination: GrayImage) -> Carried? {
        precondition(alpha.count == sizes.carryWidth * sizes.carryHeight)
        guard let field = accumulate(from: from, to: to) else { return nil }
        // This alpha stays in use until a newer one comes: follow it, and drop the older ones.
        followed = followed.filter { $0 >= from }
        followed.insert(from)
        let frames = steps.filter { $0.pts > from && $0.pts <= to }.count
        let mean = warp(alpha, field: field.field, trust: field.trust)
        warped.withUnsafeBufferPointer { up.resample($0.baseAddress!, sourceStride: sizes.carryWidth, into: destination) }
        return Carried(frames: frames, meanPixels: mean)
    }

    /// The composed motion and trust from `to` back to `from`: extended by one step from the last
    /// one when it can be, else built from the steps kept.
    private func accumulate(from: UInt64, to: UInt64) -> Accumulated? {
        guard knows(from: from, to: to) else { return nil }
        let cachedEntry = accumulated[from]
        if let cached = cachedEntry, cached.to == to { return cached }
        let last = steps.lastIndex { $0.pts == to }!
        var result: Accumulated
        var index: Int
        if let cached = cachedEntry, let at = steps.lastIndex(where: { $0.pts == cached.to }), at < last {
            result = cached
            index = at + 1
        } else {
            let first = steps.firstIndex { $0.pts == from }!
            let step = steps[first + 1]
            result = Accumulated(from: from, to: step.pts, field: step.back!, trust: step.trust!)
            index = first + 2
        }
        while index <= last {
            result = MotionCarryKernel.compose(result, with: steps[index])
            index += 1
        }
        accumulated[from] = result
        if accumulated.count > MotionCarryKernel.maxFollowed + 1, let oldest = accumulated.keys.filter({ !followed.contains($0) && $0 != from }).min() {
            accumulated[oldest] = nil
        }
        return result
    }

    /// B_new(x) = b(x) + B_old(x + b(x)); trust likewise, multiplied.
    private static func compose(_ old: Accumulated, with step: Step) -> Accumulated {
        let back = step.back!, stepTrust = step.trust!
        let w = back.width, h = back.height, n = w * h
        var dx = [Float](), dy = [Float](), trust = [Float]()
        back.dx.withUnsafeBufferPointer { bdx in
        back.dy.withUnsafeBufferPointer { bdy in
        stepTrust.withUnsafeBufferPointer { btrust in
        old.field.dx.withUnsafeBufferPointer { odx in
        old.field.dy.withUnsafeBufferPointer { ody in
        old.trust.withUnsafeBufferPointer { otrust in
            let bdx = bdx.baseAddress!, bdy = bdy.baseAddress!, btrust = btrust.baseAddress!
            let odx = odx.baseAddress!, ody = ody.baseAddress!, otrust = otrust.baseAddress!
            dx = [Float](unsafeUninitializedCapacity: n) { ndx, dxCount in
                dy = [Float](unsafeUninitializedCapacity: n) { ndy, dyCount in
                    trust = [Float](unsafeUninitializedCapacity: n) { ntrust, trustCount in
                        for y in 0..<h {
                            for x in 0..<w {
                                let i = y &* w &+ x
                                let px = Float(x) + bdx[i], py = Float(y) + bdy[i]
                                ndx[i] = bdx[i] + bilinear(odx, width: w, height: h, x: px, y: py)
                                ndy[i] = bdy[i] + bilinear(ody, width: w, height: h, x: px, y: py)
                                ntrust[i] = btrust[i] * bilinear(otrust, width: w, height: h, x: px, y: py)
                            }
                        }
                        trustCount = n
                    }
                    dyCount = n
                }
                dxCount = n
            }
        }}}}}}
        var field = FlowField(width: w, height: h)
        field.dx = dx
        field.dy = dy
        return Accumulated(from: old.from, to: step.pts, field: field, trust: trust)
    }

    /// A step's trust by the picture: 1 where the previous frame warped by the motion shows what this
    /// frame shows (the mean luma difference over a 5×5 window within `tolerance`, 0…1), falling to 0
    /// at twice it; 0 where the point lies outside. A window, not a pixel: a patch that appeared from
    /// nowhere (an occluder) mostly mismatches, though a few of its pixels may match by chance.
    static func trust(back: FlowField, current: LumaPlane, previous: LumaPlane, tolerance: Float) -> [Float] {
        let w = back.width, h = back.height, n = w * h
        let count = (n + 7) / 8 * 8
        let error = UnsafeMutablePointer<Float>.allocate(capacity: 2 * count)
        defer { error.deallocate() }
        let outside = [Bool](unsafeUninitializedCapacity: n) { flags, initialized in
            previous.values.withUnsafeBufferPointer { p in
                current.values.withUnsafeBufferPointer { c in
                    for y in 0..<h {
                        for x in 0..<w {
                            let i = y * w + x
                            let px = Float(x) + back.dx[i], py = Float(y) + back.dy[i]
                            flags[i] = !(px >= -0.5 && py >= -0.5 && px <= Float(w) - 0.5 && py <= Float(h) - 0.5)
                            error[i] = abs(bilinear(p.baseAddress!, width: w, height: h, x: px, y: py) - c[i])
                        }
                    }
                }
            }
            initialized = n
        }
        let radius = 2
        OpticalFlowKernel.boxSum(error, width: w, height: h, radius: radius, scratch: error + count)
        var trust = [Float](repeating: 0, count: n)
        for y in 0..<h {
            let rows = Float(min(h - 1, y + radius) - max(0, y - radius) + 1)
            for x in 0..<w where !outside[y * w + x] {
                let columns = Float(min(w - 1, x + radius) - max(0, x - radius) + 1)
                let mean = error[y * w + x] / (rows * columns)
                trust[y * w + x] = min(1, max(0, 2 - mean / tolerance))
            }
        }
        return trust
    }

    /// Warps `alpha` (carry size) through `field`/`trust` (motion size, brought to the carry size
    /// first: one sample a pixel then) into `warped`; returns the mean displacement under the
    /// result, in frame pixels.
    private func warp(_ alpha: [Float], field: FlowField, trust: [Float]) -> Double {
        let cw = sizes.carryWidth, ch = sizes.carryHeight
        let motion = OpticalFlowKernel.upsampled(field, width: cw, height: ch, with: fieldUp)
        let confidence = OpticalFlowKernel.resized(trust, with: fieldUp)
        let toFrame = Double(frameWidth) / Double(cw)
        var moved = 0.0, weight = 0.0
        alpha.withUnsafeBufferPointer { a in
            motion.dx.withUnsafeBufferPointer { dx in
                motion.dy.withUnsafeBufferPointer { dy in
                    confidence.withUnsafeBufferPointer { trusted in
                        warped.withUnsafeMutableBufferPointer { out in
                            let a = a.baseAddress!, dx = dx.baseAddress!, dy = dy.baseAddress!
                            let trusted = trusted.baseAddress!, out = out.baseAddress!
                            for y in 0..<ch {
                                var rowMoved: Float = 0, rowWeight: Float = 0
                                for x in 0..<cw {
                                    let i = y &* cw &+ x
                                    let ux = dx[i], uy = dy[i], c = trusted[i]
                                    let carried = bilinear(a, width: cw, height: ch, x: Float(x) + ux, y: Float(y) + uy)
                                    let value = c * carried + (1 - c) * a[i]
                                    out[i] = value
                                    rowMoved += value * (ux * ux + uy * uy).squareRoot()
                                    rowWeight += value
                                }
                                moved += Double(rowMoved)
                                weight += Double(rowWeight)
                            }
                        }
                    }
                }
            }
        }
        return weight > 0 ? moved / weight * toFrame : 0
    }

    /// A byte plane averaged down to floats in 0…1 (up to 3×3 samples per output pixel, as the luma).
    static func averaged(_ plane: GrayView, width: Int, height: Int) -> [Float] {
        let (nx, xs) = SampleGrid.points(source: plane.width, output: width)
        let (ny, ys) = SampleGrid.points(source: plane.height, output: height)
        var out = [Float](repeating: 0, count: width * height)
        let norm = 1 / (Float(nx * ny) * 255)
        for y in 0..<height {
            for x in 0..<width {
                var sum = 0
                for j in 0..<ny {
                    let row = plane.base + ys[y * ny + j] * plane.stride
                    for i in 0..<nx { sum += Int(row[xs[x * nx + i]]) }
                }
                out[y * width + x] = Float(sum) * norm
            }
        }
        return out
    }
}
