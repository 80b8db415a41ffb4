import Foundation
import MattePixelTypes

/// Dense motion between two frames at a low resolution: coarse-to-fine Lucas–Kanade, solved per
/// pixel over a small window at every pyramid level. Cheap by design (a few hundred thousand pixel
/// operations per frame at 256×144): the element runs it on every frame to carry a stale alpha to the
/// frame it leaves with.

extension LumaPlane {
    /// The luma of `frame` averaged down to `width`×`height` (at most the frame's size): each output
    /// pixel averages a grid of up to 3×3 samples spread over the area it covers. Reading every
    /// source pixel of a 1080p frame would cost more than the whole motion estimate.
    init(frame: BGRAImage, width: Int, height: Int) {
        precondition(width <= frame.width && height <= frame.height && width > 0 && height > 0)
        let (nx, xs) = SampleGrid.points(source: frame.width, output: width)
        let (ny, ys) = SampleGrid.points(source: frame.height, output: height)
        var values = [Float](repeating: 0, count: width * height)
        let norm = 1 / (Float(nx * ny) * 255 * 1024)
        values.withUnsafeMutableBufferPointer { out in
            let out = out.baseAddress!
            Slices.forEach(of: height, slices: Slices.count(work: frame.width * frame.height)) { rows, _ in
                for y in rows {
                    for x in 0..<width {
                        var sum = 0
                        for j in 0..<ny {
                            let row = frame.base + ys[y * ny + j] * frame.stride
                            for i in 0..<nx {
                                let p = row + xs[x * nx + i] * 4
                                // BT.601 weights in 10-bit fixed point (B, G, R byte order).
                                sum += 117 * Int(p[0]) + 601 * Int(p[1]) + 306 * Int(p[2])
                            }
                        }
                        out[y * width + x] = Float(sum) * norm
                    }
                }
            }
        }
        self.init(width: width, height: height, values: values)
    }

    /// Half the size (2×2 means; an odd last row or column is dropped).
    func halved() -> LumaPlane {
        let w = max(1, width / 2), h = max(1, height / 2)
        var out = [Float](repeating: 0, count: w * h)
        for y in 0..<h {
            let y0 = min(2 * y, height - 1), y1 = min(2 * y + 1, height - 1)
            for x in 0..<w {
                let x0 = min(2 * x, width - 1), x1 = min(2 * x + 1, width - 1)
                out[y * w + x] = 0.25 * (values[y0 * width + x0] + values[y0 * width + x1]
                                         + values[y1 * width + x0] + values[y1 * width + x1])
            }
        }
        return LumaPlane(width: w, height: h, values: out)
    }
}

/// Where an output pixel's samples lie along one axis when a plane is averaged down cheaply: up to
/// three points spread evenly over the source span it covers.
enum SampleGrid {
    /// (points per output pixel, the source index of each: output o's are at o·count ..< (o+1)·count).
    static func points(source: Int, output: Int) -> (Int, [Int]) {
        let scale = Double(source) / Double(output)
        let count = min(3, max(1, Int(scale.rounded(.up))))
        var points = [Int](repeating: 0, count: output * count)
        for o in 0..<output {
            for i in 0..<count {
                points[o * count + i] = min(source - 1, Int((Double(o) + (Double(i) + 0.5) / Double(count)) * scale))
            }
        }
        return (count, points)
    }
}

/// `value` limited to ±`limit` (lane by lane; NaN becomes 0).
@inline(__always)
func clamp(_ value: SIMD8<Float>, _ limit: SIMD8<Float>) -> SIMD8<Float> {
    let low = value.replacing(with: -limit, where: value .< -limit)
    let both = low.replacing(with: limit, where: low .> limit)
    return both.replacing(with: 0, where: both .!= both)
}

@inline(__always)
func load8(_ plane: UnsafeMutablePointer<Float>, _ index: Int) -> SIMD8<Float> {
    UnsafeRawPointer(plane + index).loadUnaligned(as: SIMD8<Float>.self)
}

@inline(__always)
func store8(_ plane: UnsafeMutablePointer<Float>, _ index: Int, _ value: SIMD8<Float>) {
    UnsafeMutableRawPointer(plane + index).storeBytes(of: value, as: SIMD8<Float>.self)
}

/// Samples `plane` (width×height) at (x, y) bilinearly, the position clamped to the plane (NaN to
/// 0). No checked conversion or arithmetic: it runs for every pixel of every refinement.
@inline(__always)
func bilinear(_ plane: UnsafePointer<Float>, width: Int, height: Int, x: Float, y: Float) -> Float {
    let cx = x > 0 ? min(x, Float(width - 1)) : 0, cy = y > 0 ? min(y, Float(height - 1)) : 0
    let x0 = Int(Int32(cx)), y0 = Int(Int32(cy))
    let fx = cx - Float(x0), fy = cy - Float(y0)
    let right = x0 &+ 1 < width ? 1 : 0, down = y0 &+ 1 < height ? width : 0
    let p = plane + (y0 &* width &+ x0)
    let top = p[0] + fx * (p[right] - p[0])
    let bottom = p[down] + fx * (p[down &+ right] - p[down])
    return top + fy * (bottom - top)
}

/// Coarse-to-fine dense Lucas–Kanade. One instance per size; not thread-safe (it keeps scratch).
public final class OpticalFlowKernel: FlowEstimating {
    public typealias Parameters = FlowParameters

    public let parameters: Parameters

    /// Scratch kept between frames (a fresh allocation this size would fault its pages in each time).
    private var scratch: UnsafeMutablePointer<Float>?
    private var scratchCount = 0

    public init(parameters: Parameters = Parameters()) {
        self.parameters = parameters
    }

    public static func luma(of frame: BGRAImage, width: Int, height: Int) -> LumaPlane {
        LumaPlane(frame: frame, width: width, height: height)
    }

    deinit { scratch?.deallocate() }

    private func workspace(_ count: Int) -> UnsafeMutablePointer<Float> {
        if let scratch, scratchCount >= count { return scratch }
        scratch?.deallocate()
        scratch = UnsafeMutablePointer<Float>.allocate(capacity: count)
        scratchCount = count
        return scratch!
    }

    /// The motion that takes `from` back to `to`: for each pixel p of `from`, `to` shows at
    /// p + field(p) what `from` shows at p. Both planes are of one size.
    public func flow(from source: LumaPlane, to target: LumaPlane) -> FlowField {
        precondition(source.width == target.width && source.height == target.height)
        var sources = [source], targets = [target]
        while min(sources.last!.width, sources.last!.height) / 2 >= parameters.coarsestSide {
            sources.append(sources.last!.halved())
            targets.append(targets.last!.halved())
        }
        var field = FlowField(width: sources.last!.width, height: sources.last!.height)
        let finest = min(parameters.finestLevel, sources.count - 1)
        for level in stride(from: sources.count - 1, through: finest, by: -1) {
            if field.width != sources[level].width || field.height != sources[level].height {
                field = OpticalFlowKernel.upsampled(field, width: sources[level].width, height: sources[level].height)
            }
            refine(&field, source: sources[level], target: targets[level],
                   iterations: level == finest ? parameters.finestIterations : parameters.iterations)
        }
        if field.width != source.width || field.height != source.height {
            field = OpticalFlowKernel.upsampled(field, width: source.width, height: source.height)
        }
        return field
    }

    /// The field at a larger size, displacements scaled with it (the ResamplerKernel's bilinear
    /// upsampling on pixel centres; `resampler`, when given, is one made for these two sizes).
    public static func upsampled(_ field: FlowField, width: Int, height: Int, with resampler: ResamplerKernel? = nil) -> FlowField {
        let up = resampler ?? ResamplerKernel(sourceWidth: field.width, sourceHeight: field.height, targetWidth: width, targetHeight: height)
        var out = FlowField(width: width, height: height)
        out.dx = resized(field.dx, with: up, scale: Float(width) / Float(field.width))
        out.dy = resized(field.dy, with: up, scale: Float(height) / Float(field.height))
        return out
    }

    /// A float plane of the resampler's source size at its target size, its values times `scale`.
    static func resized(_ plane: [Float], with up: ResamplerKernel, scale: Float = 1) -> [Float] {
        precondition(plane.count == up.sourceWidth * up.sourceHeight)
        var out = [Float](repeating: 0, count: up.targetWidth * up.targetHeight)
        plane.withUnsafeBufferPointer { source in
            out.withUnsafeMutableBufferPointer { target in
                up.resample(source.baseAddress!, sourceStride: up.sourceWidth, into: target.baseAddress!, destinationStride: up.targetWidth)
                if scale != 1 { for i in target.indices { target[i] *= scale } }
            }
        }
        return out
    }

    private func refine(_ field: inout FlowField, source: LumaPlane, target: LumaPlane, iterations: Int) {
        let w = source.width, h = source.height, n = w * h
        // Planes padded to whole vectors: the elementwise passes run eight lanes at a time to the end
        // (the padding's values are never read back).
        let np = (n + 7) / 8 * 8
        let r = parameters.radius
        let lambda = SIMD8<Float>(repeating: parameters.regularization * Float((2 * r + 1) * (2 * r + 1)))
        let maxStep = SIMD8<Float>(repeating: parameters.maxStep)
        let smoothEveryIteration = parameters.smoothEveryIteration
        // Scratch: gradients, the tensor's three sums, the two right-hand sides, the weights, the motion.
        let buffer = workspace(13 * np)
        let gx = buffer, gy = buffer + np, gxx = buffer + 2 * np, gxy = buffer + 3 * np, gyy = buffer + 4 * np
        let bx = buffer + 5 * np, by = buffer + 6 * np, inside = buffer + 7 * np, weight = buffer + 8 * np
        let scratch = buffer + 9 * np, confidence = buffer + 10 * np, dx = buffer + 11 * np, dy = buffer + 12 * np
        field.dx.withUnsafeBufferPointer { dx.update(from: $0.baseAddress!, count: n) }
        field.dy.withUnsafeBufferPointer { dy.update(from: $0.baseAddress!, count: n) }
        source.values.withUnsafeBufferPointer { s in
            let s = s.baseAddress!
            for y in 0..<h {
                let up = s + max(y - 1, 0) * w, down = s + min(y + 1, h - 1) * w, row = s + y * w
                for x in 0..<w {
                    gx[y * w + x] = 0.5 * (row[min(x + 1, w - 1)] - row[max(x - 1, 0)])
                    gy[y * w + x] = 0.5 * (down[x] - up[x])
                }
            }
        }
        for i in stride(from: 0, to: np, by: 8) {
            let ix = load8(gx, i), iy = load8(gy, i)
            store8(gxx, i, ix * ix)
            store8(gxy, i, ix * iy)
            store8(gyy, i, iy * iy)
        }
        OpticalFlowKernel.boxSum(gxx, width: w, height: h, radius: r, scratch: scratch)
        OpticalFlowKernel.boxSum(gxy, width: w, height: h, radius: r, scratch: scratch)
        OpticalFlowKernel.boxSum(gyy, width: w, height: h, radius: r, scratch: scratch)
        // How well each pixel's window pins the motion down (the tensor's smaller eigenvalue, roughly).
        for i in stride(from: 0, to: np, by: 8) {
            let a = load8(gxx, i), b = load8(gxy, i), d = load8(gyy, i)
            let c = (a * d - b * b) / (a + d + lambda)
            store8(confidence, i, c.replacing(with: 0, where: .!(c .> 0)))
        }
        let limitX = Float(w - 1), limitY = Float(h - 1)
        target.values.withUnsafeBufferPointer { t in
            source.values.withUnsafeBufferPointer { s in
                let t = t.baseAddress!, s = s.baseAddress!
                for _ in 0..<iterations {
                    for y in 0..<h {
                        for x in 0..<w {
                            let i = y &* w &+ x
                            let px = Float(x) + dx[i], py = Float(y) + dy[i]
                            // A point that left the frame has nothing to match: it neither pulls its
                            // window nor lends its motion to its neighbours below.
                            let valid: Float = px >= 0 && py >= 0 && px <= limitX && py <= limitY ? 1 : 0
                            inside[i] = valid
                            let residual = (bilinear(t, width: w, height: h, x: px, y: py) - s[i]) * valid
                            bx[i] = gx[i] * residual
                            by[i] = gy[i] * residual
                        }
                    }
                    OpticalFlowKernel.boxSum(bx, width: w, height: h, radius: r, scratch: scratch)
                    OpticalFlowKernel.boxSum(by, width: w, height: h, radius: r, scratch: scratch)
                    for i in stride(from: 0, to: np, by: 8) {
                        let a = load8(gxx, i) + lambda, b = load8(gxy, i), d = load8(gyy, i) + lambda
                        let sx = load8(bx, i), sy = load8(by, i)
                        let det = a * d - b * b
                        let positive = det .> 0
                        let ux = (-(d * sx - b * sy) / det).replacing(with: 0, where: .!positive)
                        let uy = (-(a * sy - b * sx) / det).replacing(with: 0, where: .!positive)
                        store8(dx, i, load8(dx, i) + clamp(ux, maxStep))
                        store8(dy, i, load8(dy, i) + clamp(uy, maxStep))
                    }
                    if smoothEveryIteration {
                        OpticalFlowKernel.spread(dx, dy, confidence: confidence, inside: inside, weight: weight, bx: bx, by: by,
                                           width: w, height: h, radius: r, scratch: scratch)
                    }
                }
                if !smoothEveryIteration {
                    OpticalFlowKernel.spread(dx, dy, confidence: confidence, inside: inside, weight: weight, bx: bx, by: by,
                                       width: w, height: h, radius: r, scratch: scratch)
                }
            }
        }
        field.dx.withUnsafeMutableBufferPointer { $0.baseAddress!.update(from: dx, count: n) }
        field.dy.withUnsafeMutableBufferPointer { $0.baseAddress!.update(from: dy, count: n) }
    }

    /// Spreads the motion of textured pixels over flat ones (normalised convolution weighted by
    /// `confidence`, points that left the frame weightless): a flat wall has no motion of its own to
    /// find, and its neighbours' is the best guess. Planes padded to whole vectors, as in `refine`.
    static func spread(_ dx: UnsafeMutablePointer<Float>, _ dy: UnsafeMutablePointer<Float>, confidence: UnsafeMutablePointer<Float>,
                       inside: UnsafeMutablePointer<Float>, weight: UnsafeMutablePointer<Float>, bx: UnsafeMutablePointer<Float>,
                       by: UnsafeMutablePointer<Float>, width w: Int, height h: Int, radius r: Int,
                       scratch: UnsafeMutablePointer<Float>) {
        let np = (w * h + 7) / 8 * 8
        let tiny = SIMD8<Float>(repeating: 1e-9)
        for i in stride(from: 0, to: np, by: 8) {
            let wi = load8(confidence, i) * load8(inside, i) + tiny
            store8(weight, i, wi)
            store8(bx, i, load8(dx, i) * wi)
            store8(by, i, load8(dy, i) * wi)
        }
        boxSum(weight, width: w, height: h, radius: r, scratch: scratch)
        boxSum(bx, width: w, height: h, radius: r, scratch: scratch)
        boxSum(by, width: w, height: h, radius: r, scratch: scratch)
        for i in stride(from: 0, to: np, by: 8) {
            let wi = load8(weight, i)
            store8(dx, i, load8(bx, i) / wi)
            store8(dy, i, load8(by, i) / wi)
        }
    }

    /// Replaces each value by the sum over its (2r+1)² window, the window clamped to the plane:
    /// along each row, then down the columns, eight pixels at a time.
    static func boxSum(_ values: UnsafeMutablePointer<Float>, width w: Int, height h: Int, radius r: Int,
                       scratch: UnsafeMutablePointer<Float>) {
        let lanes = 8
        let interior = w > 2 * r ? r..<(w - r) : 0..<0
        let vectorEnd = w > 2 * r ? interior.lowerBound + (interior.count / lanes) * lanes : 0
        let ends = [0..<min(interior.lowerBound, w), vectorEnd..<w]
        for y in 0..<h {
            let row = values + y * w, out = scratch + y * w
            var x = interior.lowerBound
            while x < vectorEnd {
                var sum = SIMD8<Float>()
                for k in -r...r { sum += UnsafeRawPointer(row + x + k).loadUnaligned(as: SIMD8<Float>.self) }
                UnsafeMutableRawPointer(out + x).storeBytes(of: sum, as: SIMD8<Float>.self)
                x += lanes
            }
            // The rest of the interior, and the ends where the window is cut short.
            for range in ends {
                for x in range {
                    var sum: Float = 0
                    for k in max(0, x - r)...min(w - 1, x + r) { sum += row[k] }
                    out[x] = sum
                }
            }
        }
        // Down the columns: each output row sums its window's rows afresh (a running sum that adds
        // and subtracts rows drifts, and the weights of flat areas are smaller than that drift).
        let vectorWidth = w / lanes * lanes
        for y in 0..<h {
            let first = max(0, y - r), last = min(h - 1, y + r)
            let out = values + y * w
            var x = 0
            while x < vectorWidth {
                var sum = SIMD8<Float>()
                for row in first...last { sum += UnsafeRawPointer(scratch + row * w + x).loadUnaligned(as: SIMD8<Float>.self) }
                UnsafeMutableRawPointer(out + x).storeBytes(of: sum, as: SIMD8<Float>.self)
                x += lanes
            }
            while x < w {
                var sum: Float = 0
                for row in first...last { sum += scratch[row * w + x] }
                out[x] = sum
                x += 1
            }
        }
    }
}
