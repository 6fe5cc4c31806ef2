/**
 * The demo's emoji, in display order. The emoji service serves this list, the voting service
 * counts votes for exactly these (one `Vote<Name>` method each) and the vote-bot picks from it.
 */
import type { Emoji } from './gen/emoji.js';
import type { VotingServiceService } from './gen/voting.js';

/** The name of a VotingService method that counts one vote, e.g. `voteDoughnut`. */
export type VoteMethod = Exclude<keyof typeof VotingServiceService, 'results'>;

/** A catalogue entry: the emoji and the method that votes for it. */
export interface CatalogEntry extends Emoji {
  readonly vote: VoteMethod;
}

// Keyed by vote method so that the compiler insists on one entry per method of voting.proto.
const BY_VOTE_METHOD: Readonly<Record<VoteMethod, Emoji>> = {
  voteJoy: { unicode: '😂', shortcode: ':joy:' },
  voteSunglasses: { unicode: '😎', shortcode: ':sunglasses:' },
  voteDoughnut: { unicode: '🍩', shortcode: ':doughnut:' },
  voteStuckOutTongueWinkingEye: { unicode: '😜', shortcode: ':stuck_out_tongue_winking_eye:' },
  voteMoneyMouthFace: { unicode: '🤑', shortcode: ':money_mouth_face:' },
  voteFlushed: { unicode: '😳', shortcode: ':flushed:' },
  voteMask: { unicode: '😷', shortcode: ':mask:' },
  voteNerdFace: { unicode: '🤓', shortcode: ':nerd_face:' },
  voteGhost: { unicode: '👻', shortcode: ':ghost:' },
  voteSkullAndCrossbones: { unicode: '☠️', shortcode: ':skull_and_crossbones:' },
  voteHeartEyesCat: { unicode: '😻', shortcode: ':heart_eyes_cat:' },
  voteHearNoEvil: { unicode: '🙉', shortcode: ':hear_no_evil:' },
  voteSeeNoEvil: { unicode: '🙈', shortcode: ':see_no_evil:' },
  voteSpeakNoEvil: { unicode: '🙊', shortcode: ':speak_no_evil:' },
  votePoop: { unicode: '💩', shortcode: ':poop:' },
  voteRainbow: { unicode: '🌈', shortcode: ':rainbow:' },
  voteThumbsup: { unicode: '👍', shortcode: ':thumbsup:' },
  voteClap: { unicode: '👏', shortcode: ':clap:' },
  votePray: { unicode: '🙏', shortcode: ':pray:' },
  voteDog: { unicode: '🐶', shortcode: ':dog:' },
  votePig: { unicode: '🐷', shortcode: ':pig:' },
  voteSnail: { unicode: '🐌', shortcode: ':snail:' },
  votePizza: { unicode: '🍕', shortcode: ':pizza:' },
  voteTaco: { unicode: '🌮', shortcode: ':taco:' },
  voteBurrito: { unicode: '🌯', shortcode: ':burrito:' },
  voteRamen: { unicode: '🍜', shortcode: ':ramen:' },
  voteChampagne: { unicode: '🍾', shortcode: ':champagne:' },
  voteBeer: { unicode: '🍺', shortcode: ':beer:' },
  voteRocket: { unicode: '🚀', shortcode: ':rocket:' },
  voteTrophy: { unicode: '🏆', shortcode: ':trophy:' },
};

/** Every emoji, in display order. */
export const CATALOG: readonly CatalogEntry[] = Object.entries(BY_VOTE_METHOD).map(([vote, emoji]) => ({ ...emoji, vote: vote as VoteMethod }));

const BY_SHORTCODE = new Map(CATALOG.map((e) => [e.shortcode, e]));

/** The entry for `shortcode` (e.g. `:doughnut:`), if there is one. */
export function findByShortcode(shortcode: string): CatalogEntry | undefined {
  return BY_SHORTCODE.get(shortcode);
}
