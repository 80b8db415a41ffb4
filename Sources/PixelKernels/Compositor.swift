import MattePixelTypes

/// Turns a BGRA frame and its alpha plane into the composite output. Pure pixel logic, reused buffers.
public struct CompositorKernel: Compositing {
    private var blurred: [UInt8] = []
    private var scratch: [UInt16] = []
    private var estimator: ForegroundEstimator?

    /// `output` is a BGRA/RGBA frame of the same size as `frame`. With `foregroundEstimation`, pixels
    /// at the matte's soft edge take their estimated foreground colour instead of the frame's, which
    /// still holds the old background there (see ForegroundEstimator): over a colour or the blur no
    /// halo of it remains, and the straight-alpha output carries clean colours.
    public init() {}

    public mutating func composite(frame: BGRAImage, alpha: GrayView, output: UnsafeMutablePointer<UInt8>,
                            outputStride: Int, format: CompositeFormat, background: BackgroundMode,
                            color: UInt32, foregroundEstimation: Bool = false, premultiplied: Bool = false) {
        defer {
            // Only outputs with alpha below 255 change: background=none, or a translucent colour.
            if premultiplied, background == .none || (background == .color && color >> 24 != 0xFF) {
                CompositorKernel.premultiply(output, stride: outputStride, width: frame.width, height: frame.height)
            }
        }
        // The whole frame as before, then the soft pixels of the soft tiles again, with their estimated colours.
        let estimated = foregroundEstimation ? estimateForeground(frame: frame, alpha: alpha) : nil
        switch background {
        case .none:
            CompositorKernel.attachAlpha(frame: frame, alpha: alpha, output: output, outputStride: outputStride, format: format)
            CompositorKernel.forEachSoftTile(of: estimated, alpha: alpha, output: output, outputStride: outputStride) {
                foreground, matte, out, _, _ in
                CompositorKernel.attachAlpha(frame: foreground, alpha: matte, output: out, outputStride: outputStride, format: format,
                                       softOnly: true)
            }
        case .color:
            CompositorKernel.flattenOverColor(frame: frame, alpha: alpha, output: output, outputStride: outputStride,
                                        format: format, color: color)
            CompositorKernel.forEachSoftTile(of: estimated, alpha: alpha, output: output, outputStride: outputStride) {
                foreground, matte, out, _, _ in
                CompositorKernel.flattenOverColor(frame: foreground, alpha: matte, output: out, outputStride: outputStride,
                                            format: format, color: color, softOnly: true)
            }
        case .blur:
            blur(frame)
            let width = frame.width
            blurred.withUnsafeBufferPointer { blurPixels in
                let under = BGRAImage(base: blurPixels.baseAddress!, width: width, height: frame.height, stride: width * 4)
                CompositorKernel.flatten(frame: frame, over: under, alpha: alpha, output: output, outputStride: outputStride,
                                   format: format)
                CompositorKernel.forEachSoftTile(of: estimated, alpha: alpha, output: output, outputStride: outputStride) {
                    foreground, matte, out, x, y in
                    let underTile = BGRAImage(base: under.base + y * under.stride + 4 * x, width: foreground.width,
                                              height: foreground.height, stride: under.stride)
                    CompositorKernel.flatten(frame: foreground, over: underTile, alpha: matte, output: out,
                                       outputStride: outputStride, format: format, softOnly: true)
                }
            }
        }
    }

    /// The estimate for this frame, by an estimator kept across frames (its buffers are reused).
    private mutating func estimateForeground(frame: BGRAImage, alpha: GrayView) -> ForegroundEstimator {
        let estimator = self.estimator ?? ForegroundEstimator()
        self.estimator = estimator
        estimator.estimate(frame: frame, alpha: alpha)
        return estimator
    }

    /// Calls `body` with each soft tile's estimated colours, its matte, where its output starts, and its
    /// position in the frame; nothing without an estimate.
    private static func forEachSoftTile(of estimator: ForegroundEstimator?, alpha: GrayView,
                                        output: UnsafeMutablePointer<UInt8>, outputStride: Int,
                                        _ body: (BGRAImage, GrayView, UnsafeMutablePointer<UInt8>, Int, Int) -> Void) {
        guard let estimator else { return }
        // Tiles do not overlap: they run concurrently (a 1080p matte has a few hundred).
        let tiles = estimator.tiles
        Slices.forEach(of: tiles.count, slices: tiles.count >= 16 ? Slices.count(work: .max) : 1) { indices, _ in
            for index in indices {
                let tile = tiles[index]
                let matte = GrayView(base: alpha.base + tile.y * alpha.stride + tile.x, width: tile.width,
                                      height: tile.height, stride: alpha.stride)
                body(estimator.foreground(ofTile: index), matte, output + tile.y * outputStride + 4 * tile.x, tile.x, tile.y)
            }
        }
    }

    /// 0 < α < 255: where an estimate replaces the frame's colour (`softOnly` passes touch only these).
    @inline(__always) static func isSoft(_ alpha: UInt8) -> Bool { alpha &- 1 < 254 }

    /// What sixteen matte bytes hold: all 0, all 255, or anything else. Most of a matte is one of the
    /// first two, where a composite needs no arithmetic.
    private enum Run { case transparent, opaque, mixed }

    @inline(__always) private static func run(of matte: UnsafePointer<UInt8>) -> Run {
        let raw = UnsafeRawPointer(matte)
        let low = raw.loadUnaligned(as: UInt64.self), high = raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
        if low | high == 0 { return .transparent }
        return low & high == .max ? .opaque : .mixed
    }

    /// Whether sixteen BGRA pixels all have alpha 255.
    @inline(__always) private static func isOpaque16(_ pixels: UnsafePointer<UInt8>) -> Bool {
        let raw = UnsafeRawPointer(pixels)
        var all = UInt64.max
        for word in 0..<8 { all &= raw.loadUnaligned(fromByteOffset: 8 * word, as: UInt64.self) }
        return all & 0xFF00_0000_FF00_0000 == 0xFF00_0000_FF00_0000
    }

    /// Runs `body(rows)` over the frame's rows, in slices on the cores for a whole-frame pass; a
    /// soft-only pass (one tile) runs as it is.
    @inline(__always) private static func forEachRows(_ height: Int, width: Int, softOnly: Bool, _ body: (Range<Int>) -> Void) {
        if softOnly {
            body(0..<height)
        } else {
            Slices.forEach(of: height, slices: Slices.count(work: width * height)) { rows, _ in body(rows) }
        }
    }

    /// `body(x)` for each pixel of `columns` of a row, or only its soft ones: the whole-row loop has
    /// no test in it, so that the compiler can vectorise the body.
    @inline(__always) private static func forEachPixel(in columns: Range<Int>, softOnly: Bool, matte: UnsafePointer<UInt8>,
                                                       _ body: (Int) -> Void) {
        if softOnly {
            for x in columns where isSoft(matte[x]) { body(x) }
        } else {
            for x in columns { body(x) }
        }
    }

    /// (s·a + b·(255 − a) + 127) / 255 with `inverse` = 255 − a, in wrapping arithmetic (at most
    /// 255² + 127: no overflow).
    @inline(__always) private static func mix(_ s: UInt8, _ a: UInt32, _ b: UInt32, _ inverse: UInt32) -> UInt8 {
        UInt8(truncatingIfNeeded: (UInt32(s) &* a &+ b &* inverse &+ 127) / 255)
    }

    /// `mix` for four BGRA pixels at once, in 16-bit lanes (s·a + b·(255 − a) + 127 ≤ 65152 fits;
    /// x / 255 = (x + 1 + x >> 8) >> 8 exactly for x ≤ 65152, see CompositorTests): the whole-row
    /// composites over a colour or an image, where the scalar loop's byte stores are the cost.
    /// `under`: four BGRA pixels of what lies beneath. Output alpha 255, R and B swapped for RGBA.
    @inline(__always) private static func mixFour(_ source: UnsafePointer<UInt8>, over under: SIMD16<UInt16>,
                                                  alpha matte: UnsafePointer<UInt8>, into output: UnsafeMutablePointer<UInt8>,
                                                  rgba: Bool) {
        let s = SIMD16<UInt16>(truncatingIfNeeded: UnsafeRawPointer(source).loadUnaligned(as: SIMD16<UInt8>.self))
        let (a0, a1, a2, a3) = (UInt16(matte[0]), UInt16(matte[1]), UInt16(matte[2]), UInt16(matte[3]))
        let a = SIMD16<UInt16>(a0, a0, a0, a0, a1, a1, a1, a1, a2, a2, a2, a2, a3, a3, a3, a3)
        let x = s &* a &+ under &* (255 &- a) &+ 127
        var q = (x &+ 1 &+ (x &>> 8)) &>> 8
        if rgba {
            q = SIMD16(q[2], q[1], q[0], q[3], q[6], q[5], q[4], q[7], q[10], q[9], q[8], q[11], q[14], q[13], q[12], q[15])
        }
        // Alpha 255 by bit operations on constant vectors (a mask `replace` runs lane by lane).
        q = q & SIMD16(0xFFFF, 0xFFFF, 0xFFFF, 0, 0xFFFF, 0xFFFF, 0xFFFF, 0, 0xFFFF, 0xFFFF, 0xFFFF, 0, 0xFFFF, 0xFFFF, 0xFFFF, 0)
            | SIMD16(0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255)
        UnsafeMutableRawPointer(output).storeBytes(of: SIMD16<UInt8>(truncatingIfNeeded: q), as: SIMD16<UInt8>.self)
    }

    /// The frame with alpha = matte (straight alpha).
    static func attachAlpha(frame: BGRAImage, alpha: GrayView, output: UnsafeMutablePointer<UInt8>,
                            outputStride: Int, format: CompositeFormat, softOnly: Bool = false) {
        let (first, third) = format == .bgra ? (0, 2) : (2, 0)
        forEachRows(frame.height, width: frame.width, softOnly: softOnly) { rows in
            for y in rows {
                let source = frame.base + y * frame.stride
                let matte = alpha.base + y * alpha.stride
                let out = output + y * outputStride
                // In place (BGRA in, BGRA out): an opaque run over opaque pixels is already the answer.
                let unchangedWhenOpaque = format == .bgra && UnsafeRawPointer(out) == UnsafeRawPointer(source)
                var first16 = 0
                if !softOnly {
                    // Sixteen pixels at a time, as 32-bit words (plain loops the compiler vectorises): the
                    // colour bytes as they are (R and B swapped for RGBA), the matte in each alpha byte.
                    let words = UnsafeRawPointer(source), outWords = UnsafeMutableRawPointer(out)
                    while first16 + 16 <= frame.width {
                        defer { first16 += 16 }
                        if unchangedWhenOpaque, run(of: matte + first16) == .opaque, isOpaque16(source + 4 * first16) { continue }
                        for x in first16..<(first16 + 16) {
                            let pixel = words.loadUnaligned(fromByteOffset: 4 * x, as: UInt32.self)
                            let color = format == .bgra ? pixel & 0x00FF_FFFF
                                : (pixel & 0xFF) << 16 | (pixel >> 16) & 0xFF | pixel & 0xFF00
                            outWords.storeBytes(of: color | UInt32(matte[x]) << 24, toByteOffset: 4 * x, as: UInt32.self)
                        }
                    }
                }
                forEachPixel(in: first16..<frame.width, softOnly: softOnly, matte: matte) { x in
                    let s = source + 4 * x, o = out + 4 * x
                    o[first] = s[0]
                    o[1] = s[1]
                    o[third] = s[2]
                    o[3] = matte[x]
                }
            }
        }
    }

    /// Multiplies each pixel's colour by its alpha in place, rounded exactly: round(c × a / 255), as
    /// (x + 128 + ((x + 128) >> 8)) >> 8 with x = c × a. Four pixels at a time in 16-bit lanes.
    static func premultiply(_ pixels: UnsafeMutablePointer<UInt8>, stride: Int, width: Int, height: Int) {
        Slices.forEach(of: height, slices: Slices.count(work: width * height)) { rows, _ in
            for y in rows {
                let row = pixels + y * stride
                var x = 0
                while x + 4 <= width {
                    let raw = UnsafeRawPointer(row + 4 * x).loadUnaligned(as: SIMD16<UInt8>.self)
                    let wide = SIMD16<UInt16>(truncatingIfNeeded: raw)
                    let alpha = SIMD16<UInt16>(wide[3], wide[3], wide[3], 255, wide[7], wide[7], wide[7], 255,
                                               wide[11], wide[11], wide[11], 255, wide[15], wide[15], wide[15], 255)
                    let product = wide &* alpha &+ 128
                    let rounded = (product &+ (product &>> 8)) &>> 8
                    UnsafeMutableRawPointer(row + 4 * x).storeBytes(of: SIMD16<UInt8>(truncatingIfNeeded: rounded),
                                                                    as: SIMD16<UInt8>.self)
                    x += 4
                }
                while x < width {
                    let pixel = row + 4 * x
                    let a = UInt16(pixel[3])
                    for channel in 0..<3 {
                        let product = UInt16(pixel[channel]) * a + 128
                        pixel[channel] = UInt8((product + (product >> 8)) >> 8)
                    }
                    x += 1
                }
            }
        }
    }

    /// The frame flattened over an ARGB colour; the result's alpha is that of "frame over colour".
    static func flattenOverColor(frame: BGRAImage, alpha: GrayView, output: UnsafeMutablePointer<UInt8>,
                                 outputStride: Int, format: CompositeFormat, color: UInt32, softOnly: Bool = false) {
        let backgroundAlpha = Int((color >> 24) & 0xFF)
        let backgroundRGB = (Int((color >> 16) & 0xFF), Int((color >> 8) & 0xFF), Int(color & 0xFF))
        let (first, third) = format == .bgra ? (0, 2) : (2, 0)
        if backgroundAlpha == 255 {
            // Over an opaque colour the total is 255², and (255·y + 255²/2) / 255² = (y + 127) / 255 for
            // every y in range: the same bytes as below, with a division by a constant.
            let (blue, green, red) = (UInt32(backgroundRGB.2), UInt32(backgroundRGB.1), UInt32(backgroundRGB.0))
            let pixel = SIMD4<UInt16>(UInt16(blue), UInt16(green), UInt16(red), 0)
            let under = SIMD16<UInt16>(lowHalf: SIMD8(lowHalf: pixel, highHalf: pixel), highHalf: SIMD8(lowHalf: pixel, highHalf: pixel))
            let rgba = format == .rgba
            // Where the matte is 0 the mix is exactly the colour: (b·255 + 127) / 255 = b. Where it is
            // 255 it is exactly the frame's colour, so in place over opaque pixels nothing changes.
            let colorWord = UInt64(0xFF00_0000 | (rgba ? blue << 16 | green << 8 | red : red << 16 | green << 8 | blue))
            let colorPair = colorWord | colorWord << 32
            forEachRows(frame.height, width: frame.width, softOnly: softOnly) { rows in
                for y in rows {
                    let source = frame.base + y * frame.stride
                    let matte = alpha.base + y * alpha.stride
                    let out = output + y * outputStride
                    let unchangedWhenOpaque = !rgba && UnsafeRawPointer(out) == UnsafeRawPointer(source)
                    var first4 = 0
                    if !softOnly {
                        while first4 + 16 <= frame.width {
                            defer { first4 += 16 }
                            switch run(of: matte + first4) {
                            case .transparent:
                                let pixels = UnsafeMutableRawPointer(out + 4 * first4)
                                for pair in 0..<8 { pixels.storeBytes(of: colorPair, toByteOffset: 8 * pair, as: UInt64.self) }
                                continue
                            case .opaque where unchangedWhenOpaque && isOpaque16(source + 4 * first4):
                                continue
                            default:
                                for x in stride(from: first4, to: first4 + 16, by: 4) {
                                    mixFour(source + 4 * x, over: under, alpha: matte + x, into: out + 4 * x, rgba: rgba)
                                }
                            }
                        }
                        while first4 + 4 <= frame.width {
                            mixFour(source + 4 * first4, over: under, alpha: matte + first4, into: out + 4 * first4, rgba: rgba)
                            first4 += 4
                        }
                    }
                    forEachPixel(in: first4..<frame.width, softOnly: softOnly, matte: matte) { x in
                        let s = source + 4 * x, o = out + 4 * x
                        let a = UInt32(matte[x]), inverse = 255 &- a
                        o[first] = mix(s[0], a, blue, inverse)
                        o[1] = mix(s[1], a, green, inverse)
                        o[third] = mix(s[2], a, red, inverse)
                        o[3] = 255
                    }
                }
            }
            return
        }
        forEachRows(frame.height, width: frame.width, softOnly: softOnly) { rows in
            for y in rows {
                let source = frame.base + y * frame.stride
                let matte = alpha.base + y * alpha.stride
                let out = output + y * outputStride
                for x in 0..<frame.width where !softOnly || CompositorKernel.isSoft(matte[x]) {
                    let s = source + 4 * x, o = out + 4 * x
                    let a = Int(matte[x])
                    // Porter-Duff "over" in straight alpha, 8-bit fixed point.
                    let under = backgroundAlpha * (255 - a)  // ×255
                    let total = a * 255 + under                 // ×255
                    if total == 0 {
                        o[0] = 0; o[1] = 0; o[2] = 0; o[3] = 0
                        continue
                    }
                    let half = total / 2
                    let blue = (Int(s[0]) * a * 255 + backgroundRGB.2 * under + half) / total
                    let green = (Int(s[1]) * a * 255 + backgroundRGB.1 * under + half) / total
                    let red = (Int(s[2]) * a * 255 + backgroundRGB.0 * under + half) / total
                    o[first] = UInt8(blue)
                    o[1] = UInt8(green)
                    o[third] = UInt8(red)
                    o[3] = UInt8((total + 127) / 255)
                }
            }
        }
    }

    /// The frame over an opaque BGRA image of the same size.
    static func flatten(frame: BGRAImage, over under: BGRAImage, alpha: GrayView,
                        output: UnsafeMutablePointer<UInt8>, outputStride: Int, format: CompositeFormat,
                        softOnly: Bool = false) {
        let (first, third) = format == .bgra ? (0, 2) : (2, 0)
        let rgba = format == .rgba
        forEachRows(frame.height, width: frame.width, softOnly: softOnly) { rows in
            for y in rows {
                let source = frame.base + y * frame.stride
                let back = under.base + y * under.stride
                let matte = alpha.base + y * alpha.stride
                let out = output + y * outputStride
                var first4 = 0
                if !softOnly {
                    while first4 + 4 <= frame.width {
                        let under = SIMD16<UInt16>(truncatingIfNeeded: UnsafeRawPointer(back + 4 * first4).loadUnaligned(as: SIMD16<UInt8>.self))
                        mixFour(source + 4 * first4, over: under, alpha: matte + first4, into: out + 4 * first4, rgba: rgba)
                        first4 += 4
                    }
                }
                forEachPixel(in: first4..<frame.width, softOnly: softOnly, matte: matte) { x in
                    let s = source + 4 * x, b = back + 4 * x, o = out + 4 * x
                    let a = UInt32(matte[x]), inverse = 255 &- a
                    o[first] = mix(s[0], a, UInt32(b[0]), inverse)
                    o[1] = mix(s[1], a, UInt32(b[1]), inverse)
                    o[third] = mix(s[2], a, UInt32(b[2]), inverse)
                    o[3] = 255
                }
            }
        }
    }

    /// Blur radius for a frame: ~2.5 % of the short side, so the look does not depend on resolution.
    static func blurRadius(width: Int, height: Int) -> Int { max(1, min(width, height) / 40) }

    /// Two passes of a separable box blur (close to a Gaussian) into `blurred` (tight BGRA rows).
    private mutating func blur(_ frame: BGRAImage) {
        let width = frame.width, height = frame.height
        let radius = CompositorKernel.blurRadius(width: width, height: height)
        if blurred.count != width * height * 4 {
            blurred = [UInt8](repeating: 255, count: width * height * 4)
            scratch = [UInt16](repeating: 0, count: width * height * 4)
            columnSums = [Int32](repeating: 0, count: width * 4)
        }
        // A window's sum is at most 255 × its size: the rounded mean of every possible sum is a table
        // (the same bytes as dividing, without a division per channel per pixel).
        let window = 2 * radius + 1
        if windowMeans.count != 255 * window + 1 {
            windowMeans = (0...(255 * window)).map { UInt8(($0 + window / 2) / window) }
        }
        blurred.withUnsafeMutableBufferPointer { target in
        scratch.withUnsafeMutableBufferPointer { temp in
        columnSums.withUnsafeMutableBufferPointer { sums in
        windowMeans.withUnsafeBufferPointer { means in
            let out = target.baseAddress!, tmp = temp.baseAddress!, sum = sums.baseAddress!, mean = means.baseAddress!
            CompositorKernel.horizontalBox(from: frame.base, stride: frame.stride, to: tmp, width: width, height: height, radius: radius, means: mean)
            CompositorKernel.verticalBox(from: tmp, to: out, sums: sum, width: width, height: height, radius: radius, means: mean)
            CompositorKernel.horizontalBox(from: out, stride: width * 4, to: tmp, width: width, height: height, radius: radius, means: mean)
            CompositorKernel.verticalBox(from: tmp, to: out, sums: sum, width: width, height: height, radius: radius, means: mean)
        }}}}
    }

    private var columnSums: [Int32] = []
    /// `windowMeans[sum]`: the rounded mean of a blur window with that sum.
    private var windowMeans: [UInt8] = []

    /// Box filter along each row (running sums, edges clamped); B, G, R only, side by side. Rows are
    /// independent: slices of them run concurrently.
    private static func horizontalBox(from source: UnsafePointer<UInt8>, stride: Int, to destination: UnsafeMutablePointer<UInt16>,
                                      width: Int, height: Int, radius: Int, means: UnsafePointer<UInt8>) {
        Slices.forEach(of: height, slices: Slices.count(work: width * height)) { rows, _ in
            for y in rows {
                let row = source + y * stride
                let out = destination + y * width * 4
                var blue = 0, green = 0, red = 0
                for i in -radius...radius {
                    let pixel = row + min(max(i, 0), width - 1) * 4
                    blue &+= Int(pixel[0])
                    green &+= Int(pixel[1])
                    red &+= Int(pixel[2])
                }
                for x in 0..<width {
                    let o = out + x * 4
                    o[0] = UInt16(means[blue])
                    o[1] = UInt16(means[green])
                    o[2] = UInt16(means[red])
                    let entering = row + min(x + radius + 1, width - 1) * 4, leaving = row + max(x - radius, 0) * 4
                    // (Wrapping arithmetic: sums stay within 255 × the window; no overflow checks in the loop.)
                    blue = blue &+ Int(entering[0]) &- Int(leaving[0])
                    green = green &+ Int(entering[1]) &- Int(leaving[1])
                    red = red &+ Int(entering[2]) &- Int(leaving[2])
                }
            }
        }
    }

    /// Box filter along columns, row by row with a running sum per column (cache friendly); alpha 255.
    /// Columns are independent: slices of them (each with its own sums) run concurrently.
    private static func verticalBox(from source: UnsafePointer<UInt16>, to destination: UnsafeMutablePointer<UInt8>,
                                    sums: UnsafeMutablePointer<Int32>, width: Int, height: Int, radius: Int,
                                    means: UnsafePointer<UInt8>) {
        let rowLength = width * 4
        Slices.forEach(of: width, slices: Slices.count(work: width * height)) { pixels, _ in
            let columns = (4 * pixels.lowerBound)..<(4 * pixels.upperBound)
            for x in columns { sums[x] = 0 }
            for i in -radius...radius {
                let row = source + min(max(i, 0), height - 1) * rowLength
                for x in columns { sums[x] &+= Int32(row[x]) }
            }
            for y in 0..<height {
                let out = destination + y * rowLength
                for x in columns { out[x] = means[Int(sums[x])] }
                for x in pixels { out[x * 4 + 3] = 255 }
                let entering = source + min(y + radius + 1, height - 1) * rowLength
                let leaving = source + max(y - radius, 0) * rowLength
                for x in columns { sums[x] = sums[x] &+ Int32(entering[x]) &- Int32(leaving[x]) }
            }
        }
    }
}
