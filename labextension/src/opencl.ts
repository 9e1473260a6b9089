/**
 * What OpenCL C adds to C, for highlighting: the words, what each one is, and the input view
 * that lets the C parser read OpenCL C.
 */
import type { Input } from '@lezer/common';

export type WordKind = 'qualifier' | 'type' | 'builtin' | 'constant';

/** Address-space, access and function qualifiers: C has no such words. */
const QUALIFIERS = [
  '__kernel', 'kernel', '__global', 'global', '__local', 'local', '__constant', 'constant',
  '__private', 'private', '__generic', 'generic', '__read_only', 'read_only', '__write_only',
  'write_only', '__read_write', 'read_write', 'uniform', 'pipe'
];

const SCALARS = ['char', 'uchar', 'short', 'ushort', 'int', 'uint', 'long', 'ulong', 'float',
  'double', 'half'];

const TYPES = [
  'bool', 'uchar', 'ushort', 'uint', 'ulong', 'half', 'size_t', 'ptrdiff_t', 'intptr_t',
  'uintptr_t', 'image1d_t', 'image1d_array_t', 'image1d_buffer_t', 'image2d_t',
  'image2d_array_t', 'image2d_depth_t', 'image2d_array_depth_t', 'image3d_t', 'sampler_t',
  'event_t', 'queue_t', 'ndrange_t', 'clk_event_t', 'reserve_id_t', 'cl_mem_fence_flags',
  'atomic_int', 'atomic_uint', 'atomic_long', 'atomic_ulong', 'atomic_float', 'atomic_double',
  'atomic_flag', 'memory_order', 'memory_scope'
];

const BUILTINS = [
  // work-item functions
  'get_work_dim', 'get_global_size', 'get_global_id', 'get_local_size',
  'get_enqueued_local_size', 'get_local_id', 'get_num_groups', 'get_group_id',
  'get_global_offset', 'get_global_linear_id', 'get_local_linear_id', 'get_sub_group_size',
  'get_max_sub_group_size', 'get_num_sub_groups', 'get_enqueued_num_sub_groups',
  'get_sub_group_id', 'get_sub_group_local_id',
  // synchronisation, fences, asynchronous copies
  'barrier', 'work_group_barrier', 'sub_group_barrier', 'mem_fence', 'read_mem_fence',
  'write_mem_fence', 'atomic_work_item_fence', 'async_work_group_copy',
  'async_work_group_strided_copy', 'wait_group_events', 'prefetch',
  // math
  'acos', 'acosh', 'acospi', 'asin', 'asinh', 'asinpi', 'atan', 'atan2', 'atanh', 'atanpi',
  'atan2pi', 'cbrt', 'ceil', 'copysign', 'cos', 'cosh', 'cospi', 'erfc', 'erf', 'exp', 'exp2',
  'exp10', 'expm1', 'fabs', 'fdim', 'floor', 'fma', 'fmax', 'fmin', 'fmod', 'fract', 'frexp',
  'hypot', 'ilogb', 'ldexp', 'lgamma', 'log', 'log2', 'log10', 'log1p', 'logb', 'mad',
  'maxmag', 'minmag', 'modf', 'nan', 'nextafter', 'pow', 'pown', 'powr', 'remainder', 'remquo',
  'rint', 'rootn', 'round', 'rsqrt', 'sin', 'sincos', 'sinh', 'sinpi', 'sqrt', 'tan', 'tanh',
  'tanpi', 'tgamma', 'trunc',
  // integer and common
  'abs', 'abs_diff', 'add_sat', 'hadd', 'rhadd', 'clamp', 'clz', 'ctz', 'mad_hi', 'mad_sat',
  'max', 'min', 'mul_hi', 'rotate', 'sub_sat', 'upsample', 'popcount', 'mad24', 'mul24',
  'degrees', 'mix', 'radians', 'step', 'smoothstep', 'sign',
  // geometric, relational
  'cross', 'dot', 'distance', 'length', 'normalize', 'fast_distance', 'fast_length',
  'fast_normalize', 'isequal', 'isnotequal', 'isgreater', 'isgreaterequal', 'isless',
  'islessequal', 'islessgreater', 'isfinite', 'isinf', 'isnan', 'isnormal', 'isordered',
  'isunordered', 'signbit', 'any', 'all', 'bitselect', 'select', 'shuffle', 'shuffle2',
  // images, output
  'read_imagef', 'read_imagei', 'read_imageui', 'read_imageh', 'write_imagef', 'write_imagei',
  'write_imageui', 'write_imageh', 'get_image_width', 'get_image_height', 'get_image_depth',
  'get_image_channel_data_type', 'get_image_channel_order', 'get_image_dim',
  'get_image_array_size', 'printf',
  // atomics (1.x and 2.0)
  'atomic_add', 'atomic_sub', 'atomic_xchg', 'atomic_inc', 'atomic_dec', 'atomic_cmpxchg',
  'atomic_min', 'atomic_max', 'atomic_and', 'atomic_or', 'atomic_xor', 'atom_add', 'atom_sub',
  'atom_xchg', 'atom_inc', 'atom_dec', 'atom_cmpxchg', 'atom_min', 'atom_max', 'atom_and',
  'atom_or', 'atom_xor', 'atomic_init', 'atomic_store', 'atomic_load', 'atomic_exchange',
  'atomic_flag_test_and_set', 'atomic_flag_clear'
];

const CONSTANTS = ['MAXFLOAT', 'HUGE_VALF', 'HUGE_VAL', 'INFINITY', 'NAN'];

const PATTERNS: ReadonlyArray<[RegExp, WordKind]> = [
  // vector types: float4, uchar16, ...
  [new RegExp(`^(?:${SCALARS.join('|')})(?:2|3|4|8|16)$`), 'type'],
  // conversions and reinterpretations: convert_float4_sat_rte, as_uint2, ...
  [new RegExp(`^(?:convert_(?:${SCALARS.join('|')})(?:2|3|4|8|16)?(?:_sat)?(?:_rt[ezpn])?` +
    `|as_(?:${SCALARS.join('|')})(?:2|3|4|8|16)?)$`), 'builtin'],
  // native_/half_ math, vector loads and stores, atomic_fetch_*, work-group and sub-group
  [/^(?:native|half)_[a-z0-9]+$/, 'builtin'],
  [/^v(?:load|store)a?(?:_half)?(?:2|3|4|8|16)?(?:_rt[ezpn])?$/, 'builtin'],
  [/^atomic_(?:fetch_[a-z]+|compare_exchange_[a-z]+)(?:_explicit)?$/, 'builtin'],
  [/^(?:work_group|sub_group)_(?:all|any|broadcast|reduce_[a-z]+|scan_(?:in|ex)clusive_[a-z]+)$/,
    'builtin'],
  // CLK_LOCAL_MEM_FENCE, CLK_NORMALIZED_COORDS_FALSE, M_PI_F, FLT_EPSILON, ...
  [/^(?:CLK_[A-Z0-9_]+|M_[A-Z0-9_]+_F)$/, 'constant'],
  [/^(?:FLT|DBL|HALF|CHAR|SCHAR|UCHAR|SHRT|USHRT|INT|UINT|LONG|ULONG)_[A-Z_]+$/, 'constant']
];

const WORDS = new Map<string, WordKind>();
for (const [list, kind] of [[TYPES, 'type'], [BUILTINS, 'builtin'], [CONSTANTS, 'constant'],
  [QUALIFIERS, 'qualifier']] as const) {
  for (const word of list) {
    WORDS.set(word, kind);
  }
}

/** What an identifier is in OpenCL C beyond C, or null for a plain identifier. */
export function openclWord(word: string): WordKind | null {
  const kind = WORDS.get(word);
  if (kind) {
    return kind;
  }
  for (const [pattern, patternKind] of PATTERNS) {
    if (pattern.test(word)) {
      return patternKind;
    }
  }
  return null;
}

/** Every identifier-like word, for scanning text. */
export const WORD = /[A-Za-z_][A-Za-z0-9_]*/g;

/** The longest qualifier: how far a word can reach across a chunk edge. */
const REACH = Math.max(...QUALIFIERS.map(q => q.length));

/** `text` with each qualifier replaced by as many spaces. */
function blankQualifiers(text: string): string {
  return text.replace(WORD, word =>
    WORDS.get(word) === 'qualifier' ? ' '.repeat(word.length) : word
  );
}

/**
 * The document as the C parser should read it: OpenCL's qualifiers (`__kernel`, `__global`,
 * `read_only`, ...) read as blanks, so `__global const float *x` parses as the C declaration
 * it is instead of a run of errors.  Positions do not move; the qualifiers are styled by the
 * decorations in clkernel.ts.
 */
export class QualifiersAsBlanks implements Input {
  constructor(private readonly base: Input) {}

  get length(): number {
    return this.base.length;
  }

  get lineChunks(): boolean {
    return this.base.lineChunks;
  }

  chunk(from: number): string {
    const text = this.base.chunk(from);
    return this.blanked(from, from + text.length, text);
  }

  read(from: number, to: number): string {
    return this.blanked(from, to, this.base.read(from, to));
  }

  /** Blank the qualifiers in `text` (= from..to), looking past both ends for cut words. */
  private blanked(from: number, to: number, text: string): string {
    const before = this.base.read(Math.max(0, from - REACH), from);
    const after = this.base.read(to, Math.min(this.base.length, to + REACH));
    const whole = blankQualifiers(before + text + after);
    return whole.slice(before.length, before.length + text.length);
  }
}
