package sim

import (
	"hash/fnv"
	"unicode"
	"unicode/utf8"
)

// vocab is what the sim "generates". Every entry is one token in real BPE
// vocabularies (Qwen3, o200k), which the gateway's tokenizer fallback tests
// rely on; do not add words without checking that.
var vocab = []string{
	" the", " of", " and", " to", " in", " is", " that", " for", " it", " as",
	" with", " was", " on", " be", " at", " by", " this", " have", " from", " or",
	" one", " had", " not", " but", " what", " all", " were", " when", " we", " there",
	" can", " an", " your", " which", " their", " said", " if", " do", " will", " each",
	" about", " how", " up", " out", " them", " then", " she", " many", " some", " so",
	" these", " would", " other", " into", " has", " more", " her", " two", " like", " him",
	" see", " time", " could", " no", " make", " than", " first", " been", " its", " who",
	" now", " people", " my", " made", " over", " did", " down", " only", " way", " find",
	" use", " may", " water", " long", " little", " very", " after", " words", " called", " just",
	" where", " most", " know",
}

// bytesPerPiece is how many bytes of a word make one token.
const bytesPerPiece = 4

// tokenize appends the sim's token ids for text to ids. Ids are hashes of
// the token's bytes: only equality matters (for the prefix cache), so there
// is no vocabulary to load. Invalid UTF-8 bytes count as symbols, one each.
func tokenize(ids []uint32, text string) []uint32 {
	scanTokens(text, func(tok string) { ids = append(ids, tokenID(tok)) })
	return ids
}

// countTokens is len(tokenize(nil, text)) without the allocations.
func countTokens(text string) int {
	n := 0
	scanTokens(text, func(string) { n++ })
	return n
}

// scanTokens calls emit with each token of text, in order.
func scanTokens(text string, emit func(string)) {
	word := -1 // start of the current word, or -1
	flush := func(end int) {
		for i := word; word >= 0 && i < end; i += bytesPerPiece {
			emit(text[i:min(i+bytesPerPiece, end)])
		}
		word = -1
	}
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		switch {
		case unicode.IsSpace(r):
			flush(i)
		case unicode.IsPunct(r) || unicode.IsSymbol(r):
			flush(i)
			emit(text[i : i+size])
		case word < 0:
			word = i
		}
		i += size
	}
	flush(len(text))
}

func pieces(wordBytes int) int { return (wordBytes + bytesPerPiece - 1) / bytesPerPiece }

func tokenID(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// Chat template tokens, ChatML-like: each message is
// <|im_start|> role \n content… <|im_end|>, and the prompt ends with
// <|im_start|> assistant \n. Only their count and equality matter.
var (
	tokIMStart   = tokenID("<|im_start|>")
	tokIMEnd     = tokenID("<|im_end|>")
	tokNewline   = tokenID("\n")
	tokAssistant = tokenID("assistant")
)

// chatTokens returns the prompt token ids of a chat request: per message
// (content tokens + 4), plus 3 for the assistant turn.
func chatTokens(msgs []chatMessage) []uint32 {
	var ids []uint32
	for _, m := range msgs {
		ids = append(ids, tokIMStart, tokenID(m.Role), tokNewline)
		for _, t := range m.texts {
			ids = tokenize(ids, t)
		}
		ids = append(ids, tokIMEnd)
	}
	return append(ids, tokIMStart, tokAssistant, tokNewline)
}
